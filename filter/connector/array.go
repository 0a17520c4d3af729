package connector

// Helpers over raw JSON arrays already validated by ParseObject.

import (
	"bytes"
	"strconv"
)

// eachElem calls fn with the raw bytes of every element of the array raw,
// stopping when fn returns false.
func eachElem(raw []byte, fn func(elem []byte) bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return
	}
	i := skipSpace(raw, 1)
	for i < len(raw) && raw[i] != ']' {
		end, err := skipValue(raw, i)
		if err != nil || !fn(raw[i:end]) {
			return
		}
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
}

// arrayLen counts the elements of the array raw, stopping past max.
func arrayLen(raw []byte, max int) int {
	n := 0
	eachElem(raw, func([]byte) bool {
		n++
		return n <= max
	})
	return n
}

// isTokenIDs reports whether raw is a non-empty array of non-negative
// integers: a tokenized prompt.
func isTokenIDs(raw []byte) bool {
	if len(raw) == 0 || raw[0] != '[' {
		return false
	}
	n, ok := 0, true
	eachElem(raw, func(e []byte) bool {
		n++
		ok = isUint(e)
		return ok
	})
	return ok && n > 0
}

func isUint(b []byte) bool {
	if len(b) == 0 || len(b) > 19 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// withElem returns the array raw with the integer n appended, as two slices
// to write one after the other (setJoined): raw without its closing bracket
// and trailing space, then ",n]". The elements are never copied here.
func withElem(raw []byte, n int64) (head, tail []byte) {
	end := bytes.LastIndexByte(raw, ']')
	head = bytes.TrimRight(raw[:end], " \t\r\n")
	tail = make([]byte, 0, 22)
	if len(head) > 1 { // not just "["
		tail = append(tail, ',')
	}
	tail = strconv.AppendInt(tail, n, 10)
	return head, append(tail, ']')
}
