package jsonraw

import "unicode/utf8"

// RenderPython calls emit and emitRune with consecutive pieces of the
// valid JSON value raw as Python's json.dumps(v, ensure_ascii=False)
// prints it, which is what chat templates' tojson prints (transformers
// renders them so): ", " and ": " between items and no other white space,
// and in strings only quotes, backslashes and control characters escaped,
// \n \r \t \b \f in their two-byte form and the others as \u00xx. So a
// value prints the same whatever escapes its client chose: \u escapes of
// other characters (all of them from Python's default json.dumps, <, > and
// & from Go's encoder) print as the characters, through emitRune, and \/
// as /. A lone surrogate escape, which has no UTF-8 form, is printed as it
// came. The pieces are runs of raw bytes between white space, commas,
// colons and escapes, and the characters escapes stand for: a piece ends
// only before an ASCII byte or an escape, or after a whole character, so no
// character is split between two. emit may be called with an empty piece and
// must not keep the slice. Neither function is kept, so passing closures
// costs no allocation.
func RenderPython(raw []byte, emit func([]byte), emitRune func(rune)) {
	start := 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			// A string: to its closing quote, eight bytes at a time
			// between escapes (a valid string has no control byte,
			// so stops marks only quotes and backslashes).
			for i++; i < len(raw); i++ {
				for i+8 <= len(raw) && stops(Word(raw, i)) == 0 {
					i += 8
				}
				if i >= len(raw) || raw[i] == '"' {
					break
				}
				if raw[i] != '\\' {
					continue
				}
				if i+1 >= len(raw) || raw[i+1] != 'u' && raw[i+1] != '/' {
					i++ // a two-byte escape that json.dumps writes too
					continue
				}
				r, size := DecodeEscape(raw[i:])
				if v, _ := Hex4(raw[min(i+2, len(raw)):]); size == 0 || r == utf8.RuneError && v != utf8.RuneError {
					i++ // malformed or a lone surrogate: as it came
					continue
				}
				emit(raw[start:i])
				start = i + size
				i += size - 1
				if r < 0x20 || r == '"' || r == '\\' {
					emit(pythonEscapes[r&0x7F])
				} else {
					emitRune(r)
				}
			}
		case ' ', '\t', '\n', '\r':
			emit(raw[start:i])
			start = i + 1
		case ',', ':':
			emit(raw[start : i+1])
			emit(separatorSpace)
			start = i + 1
		}
	}
	emit(raw[min(start, len(raw)):])
}

var separatorSpace = []byte{' '}

// pythonEscapes holds json.dumps's escapes of the control characters, the
// quote and the backslash: the two-byte escapes that decode to them (see
// escapes; all but \/), else \u00xx.
var pythonEscapes = func() (t [128][]byte) {
	const hex = "0123456789abcdef"
	for r := range 0x20 {
		t[r] = []byte{'\\', 'u', '0', '0', hex[r>>4], hex[r&0xF]}
	}
	for c, r := range escapes {
		if r != 0 && c != '/' {
			t[r] = []byte{'\\', byte(c)}
		}
	}
	return t
}()
