package tokenest

import (
	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
	"github.com/pdroute/pdroute/tokenest/internal/textmodel"
)

// Chat-template overhead of the Default method, in tokens. Measured on the
// reference template (a ChatML template with tools as JSON, see
// RATIONALE.md (token estimation)) with cl100k_base; tokcalib's tests check these
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

	b       []byte // the body
	ordered bool   // the ordered walk (see walk.go)
	depth   int    // arrays and objects open around the value being read

	chars       int               // Chars4: characters of text
	text, tools textmodel.Counter // Default
	cache       *Cache            // tool definitions validated (and counted) before, or nil
	bd          Breakdown
	idPrompt    bool // the input is a token-id prompt

	index   *Index  // where the top-level members are, or nil
	spread  *spread // read long strings in part (EstimateNear), or nil
	sampled bool    // some string was
}

// walk reads body as a request of shape sh.
func (t *tally) walk(body []byte, sh shape) error {
	t.b, t.shape = body, sh
	i := jsonraw.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return ErrNotJSON
	}
	var (
		m   members
		end int
		err error
	)
	switch sh {
	case completions:
		end, err = t.object(i, completionKeys, &m, func(_, v int) (int, error) {
			if !t.present(v) {
				return 0, ErrNoInput
			}
			return t.prompt(v, "prompt", allowText|allowIDs, t.method == Chars4 && !t.prefix.on)
		})
	case chat:
		end, err = t.object(i, chatKeys, &m, t.chat)
	case responses:
		end, err = t.object(i, responsesKeys, &m, func(k, v int) (int, error) { return t.responses(&m, k, v) })
	default:
		end, err = t.object(i, generateKeys, &m, func(k, v int) (int, error) { return t.generate(&m, k, v) })
	}
	if err != nil {
		return err
	}
	if jsonraw.SkipSpace(body, end) != len(body) {
		return ErrNotJSON
	}
	if sh == chat || sh == responses {
		t.overhead(replyPrimer)
	}
	return nil
}

// Members each shape reads, in the order it reads them.
var (
	completionKeys = newKeys("prompt")
	generateKeys   = newKeys("text", "input_ids", "image_data?")
	chatKeys       = newKeys("messages", "tools?", "functions?")
	responsesKeys  = newKeys("instructions?", "input", "tools?")
	messageKeys    = newKeys("role", "name?", "content?", "tool_calls?")
	// a Responses input item: its type, a message's members, a function
	// call's and a function call output's
	itemKeys     = newKeys("type", "role", "name", "content", "tool_calls", "arguments", "output")
	partKeys     = newKeys("type", "text", "refusal")
	toolCallKeys = newKeys("function")
	functionKeys = newKeys("name", "arguments")
)

func (t *tally) result() Result {
	b := t.bd
	if t.method == Chars4 {
		b.Text += t.chars / 4
	} else {
		t.endSpread()
		b.Text += t.text.Estimate()
		b.Tools += t.tools.Estimate()
	}
	return Result{Tokens: b.Total(), Exact: t.idPrompt && b.Total() == b.TokenIDs, Method: t.method, Breakdown: b, Sampled: t.sampled}
}

// textString counts (or hashes) the string at t.b[v] as text.
func (t *tally) textString(v int) (int, error) {
	var end int
	switch {
	case t.prefix.on:
		s, e, err := t.str(v)
		if err != nil {
			return 0, err
		}
		t.prefix.text(s)
		end = e
	case t.method == Chars4:
		var n int
		end, n = jsonraw.CountString(t.b, v)
		t.chars += n
	default:
		if t.spread != nil {
			var ok bool
			if end, ok = t.sampledString(v); ok {
				break
			}
		}
		end = t.text.JSONString(t.b, v)
	}
	if end < 0 {
		return 0, ErrNotJSON
	}
	return end, nil
}

func (t *tally) overhead(n int) {
	if !t.prefix.on && t.method == Default {
		t.bd.Overhead += n
	}
}

// Kinds of prompt a field accepts.
const (
	allowText = 1 << iota // a string or an array of strings
	allowIDs              // an array of token ids or an array of such arrays
)

// prompt counts a completion-style prompt at t.b[v]: a string, an array of
// strings, an array of token ids, or an array of arrays of token ids. With
// byLength (PR #890's rule for /v1/completions under Chars4) an array
// counts as its number of elements, whatever they are.
func (t *tally) prompt(v int, field string, allow int, byLength bool) (int, error) {
	kind := t.kind(v)
	if kind == jsonraw.String && allow&allowText != 0 {
		return t.textString(v)
	}
	if kind != jsonraw.Array {
		return 0, fieldErr(field, promptWant(allow))
	}
	first := byte(jsonraw.Invalid)
	end, n, err := t.array(v, func(n, e int) (int, error) {
		k := t.kind(e)
		if n == 0 {
			first = k
		}
		switch {
		case k != first:
			return 0, fieldErr(indexed(field, n), "elements of different types")
		case k == jsonraw.String && allow&allowText != 0:
			if byLength {
				_, end, err := t.str(e)
				return end, err
			}
			return t.textString(e)
		case k == jsonraw.Number && allow&allowIDs != 0:
			return t.tokenID(e, field, -1, n, !byLength)
		case k == jsonraw.Array && allow&allowIDs != 0:
			return t.idList(e, field, n, !byLength)
		}
		return 0, fieldErr(indexed(field, n), promptWant(allow))
	})
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fieldErr(field, "empty array")
	}
	if byLength {
		if first == jsonraw.String {
			t.chars += 4 * n // counted as n tokens of text
		} else {
			t.bd.TokenIDs += n
		}
	}
	t.idPrompt = first != jsonraw.String && !(byLength && first == jsonraw.Array)
	return end, nil
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

// idList counts the array of token ids at t.b[v], element outer of field.
func (t *tally) idList(v int, field string, outer int, count bool) (int, error) {
	if t.kind(v) != jsonraw.Array {
		return 0, fieldErr(indexed(field, outer), "want an array of token ids")
	}
	end, n, err := t.array(v, func(n, e int) (int, error) { return t.tokenID(e, field, outer, n, count) })
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fieldErr(indexed(field, outer), "empty array")
	}
	return end, nil
}

// tokenID checks one token id (an integer in [0, 2^32)), element i of
// field (or of its element outer, when outer ≥ 0), and counts or hashes
// it.
func (t *tally) tokenID(v int, field string, outer, i int, count bool) (int, error) {
	bad := func() error {
		if outer >= 0 {
			field = indexed(field, outer)
		}
		return fieldErr(indexed(field, i), "want a token id (an integer from 0 to 4294967295)")
	}
	if t.kind(v) != jsonraw.Number {
		return 0, bad()
	}
	end := jsonraw.SkipNumber(t.b, v)
	if end < 0 {
		return 0, ErrNotJSON
	}
	if end-v > 10 {
		return 0, bad()
	}
	var id uint64
	for _, c := range t.b[v:end] {
		if c < '0' || c > '9' {
			return 0, bad()
		}
		id = id*10 + uint64(c-'0')
	}
	if id > 1<<32-1 {
		return 0, bad()
	}
	switch {
	case t.prefix.on:
		t.prefix.id(uint32(id))
	case count:
		t.bd.TokenIDs++
	}
	return end, nil
}

// generate reads member k (generateKeys) of a /generate body.
func (t *tally) generate(m *members, k, v int) (int, error) {
	switch k {
	case 0, 1: // text, input_ids: one of them
		other := m.value(1 - k)
		switch {
		case !t.present(v) && k == 1 && !t.present(other):
			return 0, ErrNoInput
		case !t.present(v):
			return t.skip(v)
		case t.present(other):
			return 0, fieldErr("input_ids", "text and input_ids are mutually exclusive")
		case k == 0:
			return t.prompt(v, "text", allowText, false)
		}
		return t.prompt(v, "input_ids", allowIDs, false)
	}
	// SGLang's image_data: one image or a list (one per prompt or per image).
	if v < 0 {
		return 0, nil
	}
	switch t.kind(v) {
	case jsonraw.Null:
		return t.skip(v)
	case jsonraw.String:
		t.media(&t.bd.Images, ImageTokens)
		_, end, err := t.str(v)
		return end, err
	case jsonraw.Array:
		end, _, err := t.array(v, func(_, e int) (int, error) {
			if t.present(e) {
				t.media(&t.bd.Images, ImageTokens)
			}
			return t.skip(e)
		})
		return end, err
	}
	return 0, fieldErr("image_data", "want a string or an array")
}

// chat reads member k (chatKeys) of a chat completion body.
func (t *tally) chat(k, v int) (int, error) {
	if k > 0 {
		return t.toolDefs(v, chatKeys.names[k])
	}
	if !t.present(v) {
		return 0, ErrNoInput
	}
	if t.kind(v) != jsonraw.Array {
		return 0, fieldErr("messages", "want an array of messages")
	}
	end, n, err := t.array(v, func(i, e int) (int, error) {
		// a chat message (message's work, in line: one function fewer
		// per message)
		if t.kind(e) != jsonraw.Object {
			return 0, fieldErr(indexed("messages", i), "want an object")
		}
		var m members
		return t.object(e, messageKeys, &m, func(k, v int) (int, error) { return t.messageMember(k, v, "messages", i) })
	})
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fieldErr("messages", "empty array")
	}
	return end, nil
}

// messageMember reads member k (messageKeys) of a message.
func (t *tally) messageMember(k, v int, field string, i int) (int, error) {
	switch k {
	case 0:
		if t.kind(v) != jsonraw.String {
			return 0, fieldErr(indexed(field, i)+".role", "want a string")
		}
		r, end, err := t.str(v)
		if err == nil {
			t.role(r)
		}
		return end, err
	case 1:
		if !t.present(v) {
			return t.skip(v)
		}
		if t.kind(v) != jsonraw.String {
			return 0, fieldErr(indexed(field, i)+".name", "want a string")
		}
		t.overhead(perName)
		if t.method == Default {
			return t.textString(v)
		}
		_, end, err := t.str(v)
		return end, err
	case 2:
		return t.content(v, field, i)
	}
	if !t.present(v) {
		return t.skip(v)
	}
	if t.kind(v) != jsonraw.Array {
		return 0, fieldErr(indexed(field, i)+".tool_calls", "want an array")
	}
	end, _, err := t.array(v, func(j, c int) (int, error) {
		at := func(suffix string) string { return indexed(indexed(field, i)+".tool_calls", j) + suffix }
		if t.kind(c) != jsonraw.Object {
			return 0, fieldErr(at(".function"), "want an object with a string name")
		}
		var m members
		return t.object(c, toolCallKeys, &m, func(_, fn int) (int, error) {
			if t.kind(fn) != jsonraw.Object {
				return 0, fieldErr(at(".function"), "want an object with a string name")
			}
			var f members
			return t.object(fn, functionKeys, &f, func(k, v int) (int, error) {
				if k == 0 && t.kind(v) != jsonraw.String {
					return 0, fieldErr(at(".function"), "want an object with a string name")
				}
				end, err := t.toolCall(k, v)
				if _, ok := err.(partError); ok {
					return 0, fieldErr(at(".function.arguments"), err.Error())
				}
				return end, err
			})
		})
	})
	return end, err
}

// role starts a message: template overhead, or the role in the prefix hash.
func (t *tally) role(r []byte) {
	if t.prefix.on {
		t.prefix.raw(r, nameSeparator)
		return
	}
	t.overhead(perMessage)
}

// content counts a message's content at t.b[v]: a string, an array of
// parts, or null.
func (t *tally) content(v int, field string, i int) (int, error) {
	switch t.kind(v) {
	case jsonraw.Invalid:
		if v < 0 {
			return 0, nil
		}
	case jsonraw.Null:
		return t.skip(v)
	case jsonraw.String:
		end, err := t.textString(v)
		t.prefix.separate()
		return end, err
	case jsonraw.Array:
		end, _, err := t.array(v, func(j, p int) (int, error) {
			end, err := t.part(p)
			if _, ok := err.(partError); ok {
				return 0, fieldErr(indexed(indexed(field, i)+".content", j), err.Error())
			}
			return end, err
		})
		return end, err
	}
	return 0, fieldErr(indexed(field, i)+".content", "want a string, an array of parts or null")
}

// partError is an error in a content part or a tool call, which the caller
// places.
type partError string

func (e partError) Error() string { return string(e) }

// Kinds of content parts.
const (
	partUnknown   = iota // type not read yet
	partText             // "text"
	partOtherText        // "input_text", "output_text"
	partRefusal
	partImage
	partAudio
	partOther // video_url, file, input_file, …
)

// part counts the content part at t.b[v] by its type. Under Chars4 on the
// chat path only "text" parts count, as in PR #890. Streaming, its type
// must come before its text.
func (t *tally) part(v int) (int, error) {
	if t.kind(v) != jsonraw.Object {
		return 0, partError("want an object")
	}
	var m members
	typ := partUnknown
	end, err := t.object(v, partKeys, &m, func(k, v int) (int, error) {
		switch {
		case k == 0:
			if t.kind(v) != jsonraw.String {
				return 0, partError("want a string type")
			}
			s, end, err := t.str(v)
			typ = partType(s)
			return end, err
		case typ == partUnknown:
			return 0, errRetry
		case k == 1 && (typ == partText || typ == partOtherText):
			if t.kind(v) != jsonraw.String {
				return 0, partError("want a string text")
			}
			if t.method == Default || t.shape != chat || typ == partText {
				end, err := t.textString(v)
				t.prefix.separate()
				return end, err
			}
		case k == 2 && typ == partRefusal && t.kind(v) == jsonraw.String && t.method == Default:
			return t.textString(v)
		}
		return t.skip(v)
	})
	if err != nil {
		return 0, err
	}
	switch typ {
	case partImage:
		t.media(&t.bd.Images, imageTokens(t.b[v:end]))
	case partAudio:
		t.media(&t.bd.Audio, audioTokens(t.b[v:end]))
	case partOther:
		t.media(&t.bd.OtherMedia, OtherMediaTokens)
	}
	return end, nil
}

// partType returns the kind of a part's raw type string.
func partType(s []byte) int {
	switch {
	case is(s, "text"):
		return partText
	case is(s, "input_text", "output_text"):
		return partOtherText
	case is(s, "refusal"):
		return partRefusal
	case is(s, "image_url", "input_image", "image", "image_pil", "image_embeds"):
		return partImage
	case is(s, "input_audio", "audio_url"):
		return partAudio
	}
	return partOther
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

// toolDefs counts the tool definitions of the array field at t.b[v]: each
// as the JSON a chat template prints, plus the block around them.
func (t *tally) toolDefs(v int, field string) (int, error) {
	if !t.present(v) {
		return t.skip(v)
	}
	if t.kind(v) != jsonraw.Array {
		return 0, fieldErr(field, "want an array")
	}
	end, n, err := t.array(v, func(j, d int) (int, error) {
		if t.kind(d) != jsonraw.Object {
			return 0, fieldErr(indexed(field, j), "want an object")
		}
		count := t.method == Default
		if t.cache != nil {
			if end, ok := t.cache.lookup(&t.tools, t.b, d, count); ok {
				return end, nil // a definition validated (and counted) before
			}
		}
		end, err := t.skip(d)
		switch {
		case err != nil || t.prefix.on:
		case t.cache != nil:
			t.cache.keep(&t.tools, t.b[d:end], count)
		case count:
			renderJSON(&t.tools, t.b[d:end])
		}
		return end, err
	})
	if n > 0 {
		t.overhead(toolBlock + n*perTool)
	}
	return end, err
}

// toolCall reads member k (functionKeys) of a call: its function name or
// its arguments (a JSON string, as OpenAI sends them, or an object), and
// counts them.
func (t *tally) toolCall(k, v int) (int, error) {
	count := !t.prefix.on && t.method == Default
	if k == 0 {
		if count {
			t.overhead(perToolCall)
			return t.tools.JSONString(t.b, v), nil
		}
		_, end, err := t.str(v)
		return end, err
	}
	switch t.kind(v) {
	case jsonraw.Invalid:
		if v < 0 {
			return 0, nil
		}
	case jsonraw.String:
		if count {
			return t.tools.JSONString(t.b, v), nil
		}
		_, end, err := t.str(v)
		return end, err
	case jsonraw.Object:
		end, err := t.skip(v)
		if err == nil && count {
			renderJSON(&t.tools, t.b[v:end])
		}
		return end, err
	case jsonraw.Null:
		return t.skip(v)
	}
	return 0, partError("want a string or an object")
}

// renderJSON scans a raw JSON value as the text a chat template prints for
// it (see jsonraw.Renderer), a buffer at a time, by the block reader.
// (Scanned piece by piece, through fast and step, tool definitions cost
// ~150 instructions per byte.) A Counter counts a text the same however it
// is split into parts, as long as no character is split, and the
// Renderer's parts split none (TestRenderSplits checks the counts).
func renderJSON(c *textmodel.Counter, raw []byte) {
	var buf [renderBuf]byte
	r := jsonraw.NewRenderer(raw)
	for n := r.Fill(buf[:]); n > 0; n = r.Fill(buf[:]) {
		c.Part(buf[:n])
	}
	c.End(len(raw))
}

// renderBuf is the size of renderJSON's buffer: a few blocks of the block
// reader (tool definitions run to a few hundred bytes each).
const renderBuf = 512

// responses reads member k (responsesKeys) of a Responses body.
func (t *tally) responses(m *members, k, v int) (int, error) {
	switch k {
	case 0: // instructions
		switch t.kind(v) {
		case jsonraw.Invalid:
			if v < 0 {
				return 0, nil
			}
		case jsonraw.Null:
			return t.skip(v)
		case jsonraw.String:
			t.role(systemRole)
			end, err := t.textString(v)
			t.prefix.separate()
			return end, err
		}
		return 0, fieldErr("instructions", "want a string")
	case 1: // input
		switch t.kind(v) {
		case jsonraw.Invalid, jsonraw.Null:
			if !t.present(m.value(0)) {
				return 0, ErrNoInput
			}
			if v < 0 {
				return 0, nil
			}
			if t.kind(v) == jsonraw.Null {
				return t.skip(v)
			}
		case jsonraw.String:
			t.role(userRole)
			end, err := t.textString(v)
			t.prefix.separate()
			return end, err
		case jsonraw.Array:
			end, _, err := t.array(v, t.item)
			return end, err
		}
		return 0, fieldErr("input", "want a string or an array of items")
	}
	return t.toolDefs(v, "tools")
}

var (
	systemRole = []byte("system")
	userRole   = []byte("user")
	toolRole   = []byte("tool")
)

// Kinds of Responses input items.
const (
	itemUnknown = iota // type not read yet
	itemMessage
	itemCall
	itemCallOutput
	itemReasoning
	itemOther // web search results, item references, …: their JSON
)

// item counts the Responses input item at t.b[v], element i of "input", by
// its type. Streaming, an item whose type has not come yet is read as a
// message, and a type that says otherwise when it comes sends the body to
// the ordered walk.
func (t *tally) item(i, v int) (int, error) {
	if t.kind(v) != jsonraw.Object {
		return 0, fieldErr(indexed("input", i), "want an object")
	}
	var m members
	typ := itemUnknown
	end, err := t.object(v, itemKeys, &m, func(k, v int) (int, error) {
		if k == 0 {
			if !t.present(v) {
				if typ == itemUnknown {
					typ = itemMessage
				}
				return t.skip(v)
			}
			if t.kind(v) != jsonraw.String {
				return 0, fieldErr(indexed("input", i)+".type", "want a string")
			}
			s, end, err := t.str(v)
			kind := itemType(s)
			if typ == itemMessage && kind != itemMessage {
				return 0, errRetry
			}
			if typ = kind; typ == itemCallOutput {
				t.role(toolRole)
			}
			return end, err
		}
		if typ == itemUnknown {
			typ = itemMessage
		}
		switch {
		case typ == itemMessage && k <= 4:
			return t.messageMember(k-1, v, "input", i)
		case typ == itemCall && k == 2:
			if t.kind(v) != jsonraw.String {
				return 0, fieldErr(indexed("input", i)+".name", "want a string")
			}
			return t.toolCall(0, v)
		case typ == itemCall && k == 5:
			end, err := t.toolCall(1, v)
			if _, ok := err.(partError); ok {
				return 0, fieldErr(indexed("input", i)+".arguments", err.Error())
			}
			return end, err
		case typ == itemCallOutput && k == 6:
			if t.kind(v) == jsonraw.String {
				end, err := t.textString(v)
				t.prefix.separate()
				return end, err
			}
			return t.content(v, "input", i)
		}
		return t.skip(v)
	})
	if err == nil && typ == itemOther && t.method == Default && !t.prefix.on {
		t.overhead(perMessage)
		renderJSON(&t.text, t.b[v:end])
	}
	return end, err
}

// itemType returns the kind of an item's raw type string.
func itemType(s []byte) int {
	switch {
	case is(s, "message"):
		return itemMessage
	case is(s, "function_call"):
		return itemCall
	case is(s, "function_call_output"):
		return itemCallOutput
	case is(s, "reasoning"):
		return itemReasoning
	}
	return itemOther
}
