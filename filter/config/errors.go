package config

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Path is the field's path, as in prefill.endpoints[1].address; empty
	// for a problem with the whole document (such as a JSON syntax error).
	Path string
	// Message says what is wrong, in words an operator can act on.
	Message string
}

// String formats the problem as "path: message" (or just the message for
// the whole document).
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Error is the error Parse returns: every problem found, field problems in
// document order followed by cross-field problems. Use errors.As to reach the
// list.
type Error struct {
	Problems []Problem // at least one
}

// Error joins the problems on one line, separated by "; ", so it fits a log
// line; print Problems one per line for people.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invalid pdroute configuration")
	if len(e.Problems) > 1 {
		fmt.Fprintf(&b, " (%d problems)", len(e.Problems))
	}
	for i, p := range e.Problems {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}
