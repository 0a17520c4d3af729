package tokenest

import (
	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
	"github.com/pdroute/pdroute/tokenest/internal/textmodel"
)

// Chat-template overhead of the Default method, in tokens. Measured on the
// reference template (a ChatML template with tools as JSON, see
// docs/rationale/tokenest.md) with cl100k_base; tokcalib's tests check these
// numbers. Llama 3's template costs the same per message.
const (
	perMessage      = 5  // <|im_start|>role\n … <|im_end|>\n
	perName         = 2  // " name=" around a message's name
	replyPrimer     = 3  // <|im_start|>assistant\n
	toolBlock       = 14 // the system block that lists the tools
	perTool         = 1  // the newline after each tool's JSON
	perToolCall     = 16 // <tool_call>\n{"name": "…", "arguments": …}\n</tool_call>
	nameSeparator   = 0x1F
	recordSeparator = 0x1E
)

// tally walks a request body and counts (Estimate) or hashes (PrefixKey)
// what it finds. One struct serves both methods and both uses so that every
// shape is walked by one piece of code.
type tally struct {
	method Method
	shape  shape
	prefix prefixHash // on: PrefixKey mode, nothing is counted

	chars       int               // Chars4: characters of text
	text, tools textmodel.Counter // Default
	b           Breakdown
	idPrompt    bool // the input is a token-id prompt
}

// walk dispatches on the path's shape.
func (t *tally) walk(body []byte, path string) error {
	sh, ok := shapeOf(path)
	if !ok {
		return ErrUnsupportedPath
	}
	t.shape = sh
	top, err := object(body)
	if err != nil {
		return err
	}
	switch sh {
	case completions:
		return t.completions(top)
	case chat:
		return t.chat(top)
	case responses:
		return t.responses(top)
	default:
		return t.generate(top)
	}
}

func (t *tally) result() Result {
	b := t.b
	if t.method == Chars4 {
		b.Text += t.chars / 4
	} else {
		b.Text += t.text.Estimate()
		b.Tools += t.tools.Estimate()
	}
	return Result{Tokens: b.Total(), Exact: t.idPrompt && b.Total() == b.TokenIDs, Method: t.method, Breakdown: b}
}

// textString counts (or hashes) the body of a JSON string as text.
func (t *tally) textString(s []byte) {
	switch {
	case t.prefix.on:
		t.prefix.text(s)
	case t.method == Chars4:
		t.chars += jsonraw.CodePoints(s)
	default:
		t.text.JSONString(s)
	}
}

func (t *tally) overhead(n int) {
	if !t.prefix.on && t.method == Default {
		t.b.Overhead += n
	}
}

func present(v []byte) bool { return v != nil && jsonraw.Kind(v) != jsonraw.Null }

// Kinds of prompt a field accepts.
const (
	allowText = 1 << iota // a string or an array of strings
	allowIDs              // an array of token ids or an array of such arrays
)

// prompt counts a completion-style prompt: a string, an array of strings, an
// array of token ids, or an array of arrays of token ids. With byLength (PR
// #890's rule for /v1/completions under Chars4) an array counts as its
// number of elements, whatever they are.
func (t *tally) prompt(p []byte, field string, allow int, byLength bool) error {
	kind := jsonraw.Kind(p)
	if kind == jsonraw.String && allow&allowText != 0 {
		t.textString(jsonraw.Str(p))
		return nil
	}
	if kind != jsonraw.Array {
		return fieldErr(field, promptWant(allow))
	}
	first := byte(jsonraw.Invalid)
	n := 0
	for it := jsonraw.Elements(p); ; n++ {
		e, ok := it.NextElem()
		if !ok {
			break
		}
		k := jsonraw.Kind(e)
		if n == 0 {
			first = k
		}
		switch {
		case k != first:
			return fieldErr(indexed(field, n), "elements of different types")
		case k == jsonraw.String && allow&allowText != 0:
			if !byLength {
				t.textString(jsonraw.Str(e))
			}
		case k == jsonraw.Number && allow&allowIDs != 0:
			if err := t.tokenID(e, field, n, !byLength); err != nil {
				return err
			}
		case k == jsonraw.Array && allow&allowIDs != 0:
			if err := t.idList(e, indexed(field, n), !byLength); err != nil {
				return err
			}
		default:
			return fieldErr(indexed(field, n), promptWant(allow))
		}
		if t.prefix.full() {
			return nil
		}
	}
	if n == 0 {
		return fieldErr(field, "empty array")
	}
	if byLength {
		if first == jsonraw.String {
			t.chars += 4 * n // counted as n tokens of text
		} else {
			t.b.TokenIDs += n
		}
	}
	t.idPrompt = first != jsonraw.String && !(byLength && first == jsonraw.Array)
	return nil
}

func promptWant(allow int) string {
	switch allow {
	case allowText:
		return "want a string or an array of strings"
	case allowIDs:
		return "want an array of token ids or of arrays of token ids"
	}
	return "want a string, an array of strings, of token ids, or of arrays of token ids"
}

// idList counts an array of token ids.
func (t *tally) idList(v []byte, field string, count bool) error {
	if jsonraw.Kind(v) != jsonraw.Array {
		return fieldErr(field, "want an array of token ids")
	}
	n := 0
	for it := jsonraw.Elements(v); ; n++ {
		e, ok := it.NextElem()
		if !ok {
			break
		}
		if err := t.tokenID(e, field, n, count); err != nil {
			return err
		}
		if t.prefix.full() {
			return nil
		}
	}
	if n == 0 {
		return fieldErr(field, "empty array")
	}
	return nil
}

// tokenID checks one token id (an integer in [0, 2^32)) and counts or
// hashes it.
func (t *tally) tokenID(e []byte, field string, i int, count bool) error {
	if len(e) == 0 || len(e) > 10 {
		return fieldErr(indexed(field, i), "want a token id (an integer from 0 to 4294967295)")
	}
	var id uint64
	for _, c := range e {
		if c < '0' || c > '9' {
			return fieldErr(indexed(field, i), "want a token id (an integer from 0 to 4294967295)")
		}
		id = id*10 + uint64(c-'0')
	}
	if id > 1<<32-1 {
		return fieldErr(indexed(field, i), "want a token id (an integer from 0 to 4294967295)")
	}
	switch {
	case t.prefix.on:
		t.prefix.id(uint32(id))
	case count:
		t.b.TokenIDs++
	}
	return nil
}

func (t *tally) completions(top []byte) error {
	p := jsonraw.Field(top, "prompt")
	if !present(p) {
		return ErrNoInput
	}
	return t.prompt(p, "prompt", allowText|allowIDs, t.method == Chars4 && !t.prefix.on)
}

func (t *tally) generate(top []byte) error {
	text, ids := jsonraw.Field(top, "text"), jsonraw.Field(top, "input_ids")
	var err error
	switch {
	case present(text) && present(ids):
		return fieldErr("input_ids", "text and input_ids are mutually exclusive")
	case present(text):
		err = t.prompt(text, "text", allowText, false)
	case present(ids):
		err = t.prompt(ids, "input_ids", allowIDs, false)
	default:
		return ErrNoInput
	}
	if err != nil {
		return err
	}
	// SGLang's image_data: one image or a list (one per prompt or per image).
	images := jsonraw.Field(top, "image_data")
	switch jsonraw.Kind(images) {
	case jsonraw.Invalid, jsonraw.Null:
	case jsonraw.String:
		t.media(&t.b.Images, ImageTokens)
	case jsonraw.Array:
		for it := jsonraw.Elements(images); ; {
			e, ok := it.NextElem()
			if !ok {
				break
			}
			if present(e) {
				t.media(&t.b.Images, ImageTokens)
			}
		}
	default:
		return fieldErr("image_data", "want a string or an array")
	}
	return nil
}

func (t *tally) chat(top []byte) error {
	msgs := jsonraw.Field(top, "messages")
	if !present(msgs) {
		return ErrNoInput
	}
	if jsonraw.Kind(msgs) != jsonraw.Array {
		return fieldErr("messages", "want an array of messages")
	}
	n := 0
	for it := jsonraw.Elements(msgs); ; n++ {
		m, ok := it.NextElem()
		if !ok {
			break
		}
		if err := t.message(m, "messages", n); err != nil {
			return err
		}
		if t.prefix.full() {
			return nil
		}
	}
	if n == 0 {
		return fieldErr("messages", "empty array")
	}
	if err := t.toolDefs(top, "tools"); err != nil {
		return err
	}
	if err := t.toolDefs(top, "functions"); err != nil {
		return err
	}
	t.overhead(replyPrimer)
	return nil
}

// message counts one chat message (or Responses message item).
func (t *tally) message(m []byte, field string, i int) error {
	if jsonraw.Kind(m) != jsonraw.Object {
		return fieldErr(indexed(field, i), "want an object")
	}
	role := jsonraw.Field(m, "role")
	if jsonraw.Kind(role) != jsonraw.String {
		return fieldErr(indexed(field, i)+".role", "want a string")
	}
	t.role(jsonraw.Str(role))
	if name := jsonraw.Field(m, "name"); present(name) {
		if jsonraw.Kind(name) != jsonraw.String {
			return fieldErr(indexed(field, i)+".name", "want a string")
		}
		t.overhead(perName)
		if t.method == Default {
			t.textString(jsonraw.Str(name))
		}
	}
	if err := t.content(jsonraw.Field(m, "content"), field, i); err != nil {
		return err
	}
	calls := jsonraw.Field(m, "tool_calls")
	if !present(calls) {
		return nil
	}
	if jsonraw.Kind(calls) != jsonraw.Array {
		return fieldErr(indexed(field, i)+".tool_calls", "want an array")
	}
	for it, j := jsonraw.Elements(calls), 0; ; j++ {
		c, ok := it.NextElem()
		if !ok {
			return nil
		}
		fn := jsonraw.Field(c, "function")
		name, args := jsonraw.Field(fn, "name"), jsonraw.Field(fn, "arguments")
		if jsonraw.Kind(fn) != jsonraw.Object || jsonraw.Kind(name) != jsonraw.String {
			return fieldErr(indexed(indexed(field, i)+".tool_calls", j)+".function", "want an object with a string name")
		}
		if err := t.toolCall(name, args); err != nil {
			return fieldErr(indexed(indexed(field, i)+".tool_calls", j)+".function.arguments", err.Error())
		}
	}
}

// role starts a message: template overhead, or the role in the prefix hash.
func (t *tally) role(r []byte) {
	if t.prefix.on {
		t.prefix.raw(r, nameSeparator)
		return
	}
	t.overhead(perMessage)
}

// content counts a message's content: a string, an array of parts, or null.
func (t *tally) content(c []byte, field string, i int) error {
	switch jsonraw.Kind(c) {
	case jsonraw.Invalid, jsonraw.Null:
		return nil
	case jsonraw.String:
		t.textString(jsonraw.Str(c))
		t.prefix.separate()
		return nil
	case jsonraw.Array:
	default:
		return fieldErr(indexed(field, i)+".content", "want a string, an array of parts or null")
	}
	for it, j := jsonraw.Elements(c), 0; ; j++ {
		p, ok := it.NextElem()
		if !ok {
			return nil
		}
		if err := t.part(p); err != nil {
			return fieldErr(indexed(indexed(field, i)+".content", j), err.Error())
		}
		if t.prefix.full() {
			return nil
		}
	}
}

type partError string

func (e partError) Error() string { return string(e) }

// part counts one content part by its type. Under Chars4 on the chat path
// only "text" parts count, as in PR #890.
func (t *tally) part(p []byte) error {
	if jsonraw.Kind(p) != jsonraw.Object {
		return partError("want an object")
	}
	typ := jsonraw.Str(jsonraw.Field(p, "type"))
	if typ == nil {
		return partError("want a string type")
	}
	switch {
	case is(typ, "text", "input_text", "output_text"):
		text := jsonraw.Field(p, "text")
		if jsonraw.Kind(text) != jsonraw.String {
			return partError("want a string text")
		}
		if t.method == Default || t.shape != chat || is(typ, "text") {
			t.textString(jsonraw.Str(text))
			t.prefix.separate()
		}
	case is(typ, "refusal"):
		if r := jsonraw.Field(p, "refusal"); jsonraw.Kind(r) == jsonraw.String && t.method == Default {
			t.textString(jsonraw.Str(r))
		}
	case is(typ, "image_url", "input_image", "image", "image_pil", "image_embeds"):
		t.media(&t.b.Images, imageTokens(p))
	case is(typ, "input_audio", "audio_url"):
		t.media(&t.b.Audio, audioTokens(p))
	default: // video_url, file, input_file, …
		t.media(&t.b.OtherMedia, OtherMediaTokens)
	}
	return nil
}

// is reports whether the raw string body s decodes to one of names.
func is(s []byte, names ...string) bool {
	for _, n := range names {
		if jsonraw.KeyIs(s, n) {
			return true
		}
	}
	return false
}

func (t *tally) media(field *int, n int) {
	if !t.prefix.on && t.method == Default {
		*field += n
	}
}

// toolDefs counts the tool definitions of an array field: each as the JSON a
// chat template prints, plus the block around them.
func (t *tally) toolDefs(top []byte, field string) error {
	v := jsonraw.Field(top, field)
	if !present(v) {
		return nil
	}
	if jsonraw.Kind(v) != jsonraw.Array {
		return fieldErr(field, "want an array")
	}
	n := 0
	for it := jsonraw.Elements(v); ; n++ {
		d, ok := it.NextElem()
		if !ok {
			break
		}
		if jsonraw.Kind(d) != jsonraw.Object {
			return fieldErr(indexed(field, n), "want an object")
		}
		if t.method == Default && !t.prefix.on {
			renderJSON(&t.tools, d)
		}
	}
	if n > 0 {
		t.overhead(toolBlock + n*perTool)
	}
	return nil
}

// toolCall counts a call's function name and arguments (a JSON string, as
// OpenAI sends them, or an object).
func (t *tally) toolCall(name, args []byte) error {
	kind := jsonraw.Kind(args)
	switch kind {
	case jsonraw.String, jsonraw.Object, jsonraw.Invalid, jsonraw.Null:
	default:
		return partError("want a string or an object")
	}
	if t.prefix.on || t.method != Default {
		return nil
	}
	t.overhead(perToolCall)
	t.tools.JSONString(jsonraw.Str(name))
	switch kind {
	case jsonraw.String:
		t.tools.JSONString(jsonraw.Str(args))
	case jsonraw.Object:
		renderJSON(&t.tools, args)
	}
	return nil
}

var space = []byte{' '}

// renderJSON scans a raw JSON value as the text a chat template prints for
// it (Python's json.dumps: ", " and ": " separators, no other white space,
// escapes kept).
func renderJSON(c *textmodel.Counter, raw []byte) {
	start, inStr := 0, false
	for i := 0; i < len(raw); i++ {
		ch := raw[i]
		if inStr {
			switch ch {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch ch {
		case '"':
			inStr = true
		case ' ', '\t', '\n', '\r':
			c.Part(raw[start:i], false)
			start = i + 1
		case ',', ':':
			c.Part(raw[start:i+1], false)
			c.Part(space, false)
			start = i + 1
		}
	}
	c.Part(raw[min(start, len(raw)):], false)
	c.End(len(raw))
}

func (t *tally) responses(top []byte) error {
	instr, input := jsonraw.Field(top, "instructions"), jsonraw.Field(top, "input")
	if !present(instr) && !present(input) {
		return ErrNoInput
	}
	switch jsonraw.Kind(instr) {
	case jsonraw.Invalid, jsonraw.Null:
	case jsonraw.String:
		t.role(systemRole)
		t.textString(jsonraw.Str(instr))
		t.prefix.separate()
	default:
		return fieldErr("instructions", "want a string")
	}
	switch jsonraw.Kind(input) {
	case jsonraw.Invalid, jsonraw.Null:
	case jsonraw.String:
		t.role(userRole)
		t.textString(jsonraw.Str(input))
		t.prefix.separate()
	case jsonraw.Array:
		for it, i := jsonraw.Elements(input), 0; ; i++ {
			item, ok := it.NextElem()
			if !ok {
				break
			}
			if err := t.item(item, i); err != nil {
				return err
			}
			if t.prefix.full() {
				return nil
			}
		}
	default:
		return fieldErr("input", "want a string or an array of items")
	}
	if err := t.toolDefs(top, "tools"); err != nil {
		return err
	}
	t.overhead(replyPrimer)
	return nil
}

var (
	systemRole = []byte("system")
	userRole   = []byte("user")
	toolRole   = []byte("tool")
)

// item counts one Responses input item by its type.
func (t *tally) item(it []byte, i int) error {
	if jsonraw.Kind(it) != jsonraw.Object {
		return fieldErr(indexed("input", i), "want an object")
	}
	typ := jsonraw.Field(it, "type")
	body := jsonraw.Str(typ)
	if present(typ) && body == nil {
		return fieldErr(indexed("input", i)+".type", "want a string")
	}
	switch {
	case !present(typ) || is(body, "message"):
		return t.message(it, "input", i)
	case is(body, "function_call"):
		name := jsonraw.Field(it, "name")
		if jsonraw.Kind(name) != jsonraw.String {
			return fieldErr(indexed("input", i)+".name", "want a string")
		}
		if err := t.toolCall(name, jsonraw.Field(it, "arguments")); err != nil {
			return fieldErr(indexed("input", i)+".arguments", err.Error())
		}
	case is(body, "function_call_output"):
		t.role(toolRole)
		out := jsonraw.Field(it, "output")
		if jsonraw.Kind(out) == jsonraw.String {
			t.textString(jsonraw.Str(out))
			t.prefix.separate()
			return nil
		}
		return t.content(out, "input", i)
	case is(body, "reasoning"):
		// Earlier reasoning is dropped by chat templates.
	default:
		// Other items (web search results, item references, …): their JSON.
		if t.method == Default && !t.prefix.on {
			t.overhead(perMessage)
			renderJSON(&t.text, it)
		}
	}
	return nil
}
