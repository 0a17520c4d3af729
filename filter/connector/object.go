package connector

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/pdroute/pdroute/tokenest"
)

// Errors of ParseObject. The plugin answers 400 to a client body that fails.
var (
	ErrNotJSON   = errors.New("not valid JSON")
	ErrNotObject = errors.New("not a JSON object")
	ErrTooDeep   = errors.New("JSON nested more than 512 levels deep")
)

// maxDepth bounds nesting: gjson validates recursively, and wasm memory never
// shrinks, so a body of 4 MiB of '[' must not become a 4-million-frame stack.
// Python's json module (every engine's parser) gives up near 1000 levels.
const maxDepth = 512

// Object indexes the top-level members of a JSON object held in a byte slice
// it does not copy: reads return sub-slices, and edits copy each untouched
// member's bytes verbatim (never decoding or re-encoding a value), so a
// 500 KB prompt costs one copy at most. The bytes must not change while the
// Object is in use.
//
// Duplicate keys are kept as they are, and reads return the last one, which
// is the one Python's json (every engine's parser) keeps. An edited key is
// written once.
type Object struct {
	src     []byte
	members []member
	close   int // offset of the closing '}'

	// a Detached object's: len(src) and checksum(src, all members); the
	// decode edits' head (decodeHead) and its checksum
	srcLen, head int
	sum, headSum uint64
}

// checksum hashes (FNV-1a) the bytes of b that the first n members'
// offsets point at: their keys and the first byte of their values, and
// the closing brace with close. It tells Rebind and RebindHead whether b is
// (the head of) the body o was indexed from.
func (o Object) checksum(b []byte, n int, close bool) uint64 {
	h := uint64(14695981039346656037)
	add := func(p []byte) {
		for _, c := range p {
			h = (h ^ uint64(c)) * 1099511628211
		}
	}
	for _, m := range o.members[:n] {
		if m.keyEnd > len(b) || m.val >= len(b) || m.start > m.keyEnd {
			return 0
		}
		add(b[m.start:m.keyEnd])
		add(b[m.val : m.val+1])
	}
	if close && o.close < len(b) {
		add(b[o.close : o.close+1])
	}
	return h
}

// decodeHead is Request.DecodeHead for o, which holds its bytes: the end
// of the last member named by decodeKeys or removed, or 0.
func (o Object) decodeHead() int {
	for i := len(o.members) - 1; i >= 0; i-- {
		if m := o.members[i]; m.removed || m.key == decodeKeys[0] || m.key == decodeKeys[1] {
			return m.end
		}
	}
	return 0
}

// headMembers is how many members lie within a Detached o's head.
func (o Object) headMembers() int {
	n := 0
	for n < len(o.members) && o.members[n].end <= o.head {
		n++
	}
	return n
}

type member struct {
	key     string // decoded key; aliases src unless it has escapes
	start   int    // offset of the key's opening quote
	keyEnd  int    // offset just past the key's closing quote
	val     int    // offset of the value
	end     int    // offset just past the value
	removed bool   // dropped by Without
}

// ParseObject validates b as one JSON object and indexes its top-level
// members. It returns ErrNotJSON, ErrNotObject or ErrTooDeep.
func ParseObject(b []byte) (Object, error) {
	// One pass of tokenest's reader validates and indexes; only a body it
	// refuses is read again, for the error to report.
	var x tokenest.Index
	if x.Read(b) {
		return indexedObject(b, &x), nil
	}
	return scanParse(b)
}

// scanParse is ParseObject by scanObject and gjson: the reasons a body is
// refused.
func scanParse(b []byte) (Object, error) {
	o, err := scanObject(b)
	if err != nil {
		if err == ErrNotObject && !gjson.ValidBytes(b) {
			return Object{}, ErrNotJSON
		}
		return Object{}, err
	}
	if !gjson.ValidBytes(b) {
		return Object{}, ErrNotJSON
	}
	return o, nil
}

// indexedObject is the Object of b from a Complete index of it.
func indexedObject(b []byte, x *tokenest.Index) Object {
	o := Object{src: b, close: x.Close, members: make([]member, len(x.Members))}
	for i, m := range x.Members {
		o.members[i] = member{start: m.Start, keyEnd: m.KeyEnd, val: m.Val, end: m.End, key: decodeKey(b[m.Start:m.KeyEnd])}
	}
	return o
}

// scanObject finds member boundaries without decoding values. It is
// iterative, allocates only the member list, and checks nesting depth; the
// caller validates the grammar with gjson afterwards.
func scanObject(b []byte) (Object, error) {
	o := Object{src: b}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return Object{}, ErrNotObject
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		o.close = i
		return o, trailing(b, i+1)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return Object{}, ErrNotJSON
		}
		m := member{start: i}
		m.keyEnd = skipString(b, i)
		if m.keyEnd < 0 {
			return Object{}, ErrNotJSON
		}
		i = skipSpace(b, m.keyEnd)
		if i >= len(b) || b[i] != ':' {
			return Object{}, ErrNotJSON
		}
		m.val = skipSpace(b, i+1)
		var err error
		if m.end, err = skipValue(b, m.val); err != nil {
			return Object{}, err
		}
		m.key = decodeKey(b[m.start:m.keyEnd])
		o.members = append(o.members, m)
		i = skipSpace(b, m.end)
		if i >= len(b) {
			return Object{}, ErrNotJSON
		}
		if b[i] == '}' {
			o.close = i
			return o, trailing(b, i+1)
		}
		if b[i] != ',' {
			return Object{}, ErrNotJSON
		}
		i = skipSpace(b, i+1)
	}
}

func trailing(b []byte, i int) error {
	if skipSpace(b, i) != len(b) {
		return ErrNotJSON
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// skipString returns the offset just past the string starting at b[i] (a
// quote), or -1 if it does not end.
func skipString(b []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		j++
		if n%2 == 0 {
			return j
		}
	}
}

// skipValue returns the offset just past the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, ErrNotJSON
	}
	switch b[i] {
	case '"':
		if end := skipString(b, i); end >= 0 {
			return end, nil
		}
		return 0, ErrNotJSON
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := skipString(b, j)
				if end < 0 {
					return 0, ErrNotJSON
				}
				j = end - 1
			case '{', '[':
				// The value is one level below the object being scanned.
				if depth++; depth >= maxDepth {
					return 0, ErrTooDeep
				}
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, ErrNotJSON
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' &&
		b[j] != '\n' && b[j] != '\r' && b[j] != '\t' {
		j++
	}
	if j == i {
		return 0, ErrNotJSON
	}
	return j, nil
}

func decodeKey(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return unsafeString(raw[1 : len(raw)-1])
	}
	return gjson.Parse(string(raw)).Str
}

// unsafeString views b as a string without copying; b must not change while
// the string is in use (Object's contract).
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// Len is the number of members (removed ones excluded; duplicates counted).
func (o Object) Len() int {
	n := 0
	for _, m := range o.members {
		if !m.removed {
			n++
		}
	}
	return n
}

// Raw returns the raw bytes of the last member named key, or nil. The slice
// aliases the parsed bytes.
func (o Object) Raw(key string) []byte {
	for i := len(o.members) - 1; i >= 0; i-- {
		if m := o.members[i]; !m.removed && m.key == key {
			return o.src[m.val:m.end:m.end]
		}
	}
	return nil
}

// Get parses the last member named key with gjson (a zero Result when
// absent). Meant for small values: a string with escapes is decoded.
func (o Object) Get(key string) gjson.Result {
	raw := o.Raw(key)
	if raw == nil {
		return gjson.Result{}
	}
	return gjson.Parse(unsafeString(raw))
}

// Without returns o with every member named by keys removed, and whether
// any was. The bytes are shared, not copied.
func (o Object) Without(keys ...string) (Object, bool) {
	first := slices.IndexFunc(o.members, func(m member) bool { return !m.removed && slices.Contains(keys, m.key) })
	if first < 0 {
		return o, false // the common case: nothing to remove, nothing copied
	}
	out := o
	out.members = slices.Clone(o.members)
	for i := first; i < len(out.members); i++ {
		if !out.members[i].removed && slices.Contains(keys, out.members[i].key) {
			out.members[i].removed = true
		}
	}
	return out, true
}

// Only returns o with every member not named by keys removed (to build a
// new body from some of a client's fields). The bytes are shared.
func (o Object) Only(keys ...string) Object {
	out := o
	out.members = slices.Clone(o.members)
	for i := range out.members {
		if !slices.Contains(keys, out.members[i].key) {
			out.members[i].removed = true
		}
	}
	return out
}

// Edit is one change to a top-level member: Set replaces or adds, Delete
// removes every occurrence.
type Edit struct {
	key   string
	value []byte
	more  []byte // appended to value: lets a value be spliced from two slices
	del   bool
}

// Set replaces key's value with raw JSON (added when absent). raw must be
// one valid JSON value; it is copied verbatim.
func Set(key string, raw []byte) Edit { return Edit{key: key, value: raw} }

// setJoined sets key to the raw JSON value a followed by b, without first
// copying them into one slice (prompt token ids plus the first token).
func setJoined(key string, a, b []byte) Edit { return Edit{key: key, value: a, more: b} }

// SetInt sets key to the integer n.
func SetInt(key string, n int64) Edit {
	return Set(key, strconv.AppendInt(nil, n, 10))
}

// SetString sets key to the JSON string s.
func SetString(key, s string) Edit { return Set(key, gjson.AppendJSONString(nil, s)) }

// Delete removes every member named key.
func Delete(key string) Edit { return Edit{key: key, del: true} }

var (
	jsonFalse = []byte("false")
	jsonNull  = []byte("null")
	jsonOne   = []byte("1")
)

// maxEdits bounds one Build or Rewrite call (a bit set tracks applied edits).
const maxEdits = 64

// Build returns a new object: o's members in order, with edits applied and
// added members last. Untouched members are copied byte for byte.
func (o Object) Build(edits ...Edit) []byte {
	return o.AppendTo(nil, edits...)
}

// AppendTo is Build appending to dst.
func (o Object) AppendTo(dst []byte, edits ...Edit) []byte {
	if len(edits) > maxEdits {
		panic("connector: too many edits")
	}
	dst = slices.Grow(dst, o.size(len(o.members)-1)+2+editsSize(edits))
	dst = append(dst, '{')
	var done uint64
	dst, n := o.appendMembers(dst, len(o.members), edits, &done)
	dst, _ = appendAdded(dst, n, edits, done)
	return append(dst, '}')
}

func editsSize(edits []Edit) int {
	n := 0
	for _, e := range edits {
		n += len(e.key) + len(e.value) + len(e.more) + 4
	}
	return n
}

// appendMembers writes members [0, upto) with edits applied, comma
// separated, and returns how many members it wrote.
func (o Object) appendMembers(dst []byte, upto int, edits []Edit, done *uint64) ([]byte, int) {
	n := 0
	for _, m := range o.members[:upto] {
		if m.removed {
			continue
		}
		j := findEdit(edits, m.key)
		switch {
		case j < 0:
		case edits[j].del || *done&(1<<j) != 0:
			continue // deleted, or a later duplicate of a set key
		default:
			*done |= 1 << j
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		if j < 0 {
			dst = append(dst, o.src[m.start:m.end]...)
			continue
		}
		dst = append(dst, o.src[m.start:m.keyEnd]...)
		dst = append(dst, ':')
		dst = append(dst, edits[j].value...)
		dst = append(dst, edits[j].more...)
	}
	return dst, n
}

// appendAdded writes the Set edits not applied yet, continuing a list of n
// members.
func appendAdded(dst []byte, n int, edits []Edit, done uint64) ([]byte, int) {
	for j, e := range edits {
		if e.del || done&(1<<j) != 0 || findEdit(edits, e.key) != j {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendKey(dst, e.key)
		dst = append(dst, ':')
		dst = append(dst, e.value...)
		dst = append(dst, e.more...)
	}
	return dst, n
}

// appendKey appends key as a JSON string, as gjson.AppendJSONString
// writes it: the keys pdroute sets are plain ASCII, copied between quotes;
// any other goes to gjson.
func appendKey(dst []byte, key string) []byte {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' || c > '~' || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return gjson.AppendJSONString(dst, key)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, '"')
}

func findEdit(edits []Edit, key string) int {
	for j := range edits {
		if edits[j].key == key {
			return j
		}
	}
	return -1
}

// BodyEdit turns the body Envoy holds into a new one with a single host call,
// proxy_set_buffer_bytes(HTTP_REQUEST_BODY, 0, Drain, Prefix): drop the first
// Drain bytes, put Prefix in front. When only the first members change (or
// members are only added), Prefix is small and the rest of the body — the
// prompt — is never copied into or out of the wasm heap. A zero BodyEdit
// changes nothing.
type BodyEdit struct {
	Drain  int    // bytes dropped from the front of the buffered body
	Prefix []byte // bytes put in front of what remains
}

// Apply returns the edited body as one slice (tests and native callers).
func (e BodyEdit) Apply(body []byte) []byte {
	out := make([]byte, 0, len(e.Prefix)+len(body)-e.Drain)
	return append(append(out, e.Prefix...), body[e.Drain:]...)
}

// Len is the edited body's length, for content-length, given the original's.
func (e BodyEdit) Len(original int) int { return original - e.Drain + len(e.Prefix) }

// Rewrite applies edits as a BodyEdit against the bytes o was parsed from.
// Members after the last one touched (edited, deleted or removed by Without)
// stay in Envoy's buffer; added members go just before them.
func (o Object) Rewrite(edits ...Edit) BodyEdit { return o.RewriteTo(nil, edits...) }

// RewriteTo is Rewrite building the prefix in dst's room (appended to
// dst[:0]), for a caller that keeps one buffer for the edits it hands over.
func (o Object) RewriteTo(dst []byte, edits ...Edit) BodyEdit {
	if len(edits) > maxEdits {
		panic("connector: too many edits")
	}
	last := -1
	for i, m := range o.members {
		if m.removed || findEdit(edits, m.key) >= 0 {
			last = i
		}
	}
	if last < 0 && len(edits) == 0 {
		return BodyEdit{}
	}
	tail := o.close
	if last+1 < len(o.members) {
		tail = o.members[last+1].start
	}
	var done uint64
	prefix := slices.Grow(dst[:0], o.size(last)+editsSize(edits)+2)
	prefix = append(prefix, '{')
	prefix, n := o.appendMembers(prefix, last+1, edits, &done)
	prefix, n = appendAdded(prefix, n, edits, done)
	if tail != o.close && n > 0 {
		prefix = append(prefix, ',')
	}
	return BodyEdit{Drain: tail, Prefix: prefix}
}

// size is the byte size of the kept members [0, last] with separators.
func (o Object) size(last int) int {
	n := 0
	for _, m := range o.members[:last+1] {
		if !m.removed {
			n += m.end - m.start + 1
		}
	}
	return n
}
