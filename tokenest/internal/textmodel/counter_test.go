package textmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

// pieces splits text with the replay.
func pieces(text string) []string {
	var out []string
	start := 0
	c := Counter{Trace: func(_ int, end int) {
		out = append(out, text[start:end])
		start = end
	}}
	c.Text([]byte(text))
	return out
}

// TestPieces pins the replay of cl100k's pre-tokenizer on its tricky
// cases (internal/calib checks it against the real tokenizer on the samples).
func TestPieces(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"Hello world", "Hello| world"},
		{"in 2024, 12345", "in| |2024|,| |12345"}, // a digit run is one piece of ⌈n/3⌉ groups
		{"foo.bar(baz)", "foo|.bar|(baz|)"},
		{"a  b", "a| | b"},
		{"x;\n\n  y", "x|;\n\n| | y"},
		{"end.  \n  ", "end|.|  \n|  "},
		{"  (self", " | (|self"},
		{"\tint x", "\tint| x"},
		{"Linux系统，好。", "Linux系统|，好|。"},
		{"नमस्ते", "नमस|्त|े"},
		{"don't", "don|'t"},
	} {
		if got := strings.Join(pieces(tt.text), "|"); got != tt.want {
			t.Errorf("%q: pieces %q, want %q", tt.text, got, tt.want)
		}
	}
}

func TestEnglishness(t *testing.T) {
	for _, tt := range []struct {
		text     string
		min, max float64
	}{
		{"the cat and the dog went to the park with all of them", 0.9, 1},
		{"der Hund und die Katze sind mit dem Ball auf der Wiese", 0, 0.2},
		{"func main() { x := 1 }", 1, 1}, // no function words: English
	} {
		var c Counter
		c.Text([]byte(tt.text))
		if e := c.LastEnglishness(); e < tt.min || e > tt.max {
			t.Errorf("%q: englishness %.2f, want [%.2f, %.2f]", tt.text, e, tt.min, tt.max)
		}
	}
	// German words of the same shapes cost more than English ones.
	var en, de Counter
	en.Text([]byte("the information is available for the system and the user"))
	de.Text([]byte("die Informationen sind verfügbar für das System und den Nutzer"))
	if en.Estimate() >= de.Estimate() {
		t.Errorf("english %d ≥ german %d", en.Estimate(), de.Estimate())
	}
}

// mixedTexts are texts of every Englishness: English, German, none,
// code, French with English, and scripts without Latin words.
var mixedTexts = []string{
	"the cat and the dog went to the park with all of them",
	"der Hund und die Katze sind mit dem Ball auf der Wiese",
	"", "func main() { x := ParseHTTPHeader(y) }",
	"le chat et the dog: un mélange de langues, and Some CamelCase Words",
	"日本語のテキスト and the English", "Ελληνικά κείμενα και русский текст",
}

// TestTextsAddUp checks that a Counter's estimate over several texts is
// the sum of each text's cost by the definition (End's doc comment): the
// Latin counts weighted e·English + (1−e)·other with the text's own
// Englishness e, the rest with their weights; End weighs the Latin counts
// of texts with e < 1 only and leaves the rest to Estimate.
func TestTextsAddUp(t *testing.T) {
	texts := append(mixedTexts[:len(mixedTexts):len(mixedTexts)], "la", "UPPER CASE ET MINUSCULES POUR LE TEST")
	var all Counter
	var want float64 // thousandths of a token
	for _, text := range texts {
		var one Counter
		one.Text([]byte(text))
		all.Text([]byte(text))
		e := one.LastEnglishness()
		for i, f := range one.Features() {
			w := float64(milliWeights[i])
			if i < NumLatin {
				w = e*w + (1-e)*float64(milliWeights[OtherLatin+i])
			}
			want += float64(f) * w
		}
		if all.LastEnglishness() != e {
			t.Errorf("%q: englishness %v after other texts, %v alone", text, all.LastEnglishness(), e)
		}
	}
	got := float64(all.sum)/(nano/1000) + float64(all.rest())
	if math.Abs(got-want) > 1e-6 {
		t.Errorf("%d texts: %.9f thousandths, by the definition %.9f", len(texts), got, want)
	}
	if int(math.Round(want/1000)) != all.Estimate() {
		t.Errorf("estimate %d, by the definition %.3f", all.Estimate(), want/1000)
	}
}

// TestAddCostMatchesScan checks that adding the Cost of a Counter of some
// texts to another costs what scanning those texts after the other's does,
// in any order of Englishness, and that a text scanned after that costs
// the same too.
func TestAddCostMatchesScan(t *testing.T) {
	texts := mixedTexts
	for i := range texts {
		for j := range texts {
			var scanned, added, part Counter
			for _, text := range texts[:i] {
				scanned.Text([]byte(text))
				added.Text([]byte(text))
			}
			for _, text := range texts[j:] {
				scanned.Text([]byte(text))
				part.Text([]byte(text))
			}
			added.AddCost(part.Cost())
			if added.Cost() != scanned.Cost() || added.Estimate() != scanned.Estimate() {
				t.Errorf("texts[:%d] then texts[%d:]: added %d (%d), scanned %d (%d)", i, j, added.Estimate(), added.Cost(), scanned.Estimate(), scanned.Cost())
			}
			added.Text([]byte("and the one after, der Hund"))
			scanned.Text([]byte("and the one after, der Hund"))
			if added.Cost() != scanned.Cost() {
				t.Errorf("texts[:%d] then texts[%d:], then a text: added %d, scanned %d", i, j, added.Cost(), scanned.Cost())
			}
		}
	}
	var only, part Counter
	part.Text([]byte("the cat"))
	only.AddCost(part.Cost())
	if only.Estimate() != part.Estimate() || only.Estimate() == 0 {
		t.Errorf("a Counter of added cost alone: %d, want %d", only.Estimate(), part.Estimate())
	}
}

func TestJSONStringMatchesText(t *testing.T) {
	var a, b Counter
	a.Text([]byte("line one\n\t\"quoted\" é 😀"))
	quoted := []byte(`"line one\n\t\"quoted\" \u00e9 \ud83d\ude00"`)
	if end := b.JSONString(quoted, 0); end != len(quoted) {
		t.Errorf("JSONString returned %d, want %d", end, len(quoted))
	}
	if a.Estimate() != b.Estimate() || a.Estimate() == 0 {
		t.Errorf("plain %d, escaped %d", a.Estimate(), b.Estimate())
	}
}

// FuzzText: any bytes, plain or as a JSON string body, give an estimate ≥ 0
// and pieces that cover the input exactly; as a JSON string, the scan
// accepts exactly what encoding/json does and ends at the closing quote.
func FuzzText(f *testing.F) {
	for _, s := range []string{"Hello world", "日本語", `a\u00e9\n`, "\xff\xfe", "  \n\t x", "\\"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Counter
		quoted := append(append([]byte{'"'}, b...), '"')
		end := c.JSONString(quoted, 0)
		if c.Estimate() < 0 {
			t.Fatal("negative estimate")
		}
		if valid := json.Valid(quoted); valid != (end == len(quoted)) {
			t.Fatalf("JSONString(%q) = %d, encoding/json says valid=%v", quoted, end, valid)
		}
		if got := strings.Join(pieces(string(b)), ""); got != string(b) {
			t.Fatalf("pieces cover %q, input %q", got, b)
		}
	})
}

// TestMilliWeights checks that every weight is a whole number of
// thousandths, which End's integer dot products rely on.
func TestMilliWeights(t *testing.T) {
	for i, v := range Weights {
		if float64(milliWeights[i])/1000 != v {
			t.Errorf("weight %s = %v, not a whole number of thousandths", FeatureName(i), v)
		}
	}
}

// TestLangTable checks that the perfect hash keeps every listed function
// word, with its language, and that other words are not found.
func TestLangTable(t *testing.T) {
	for count, words := range map[uint32][]string{1: englishWords, 1 << 16: otherWords} {
		for _, w := range words {
			if got := langCount(packWord(w)); got != count {
				t.Errorf("%q: counts %#x, want %#x", w, got, count)
			}
		}
	}
	for _, w := range []string{"xyz", "tha", "dog", "ab", "thee"} {
		if got := langCount(packWord(w)); got != 0 {
			t.Errorf("%q: counts %#x, want none", w, got)
		}
	}
}

// TestDecodeRune checks the inline decoder against utf8.DecodeRune on
// every one-, two- and three-byte prefix and on short and broken input.
func TestDecodeRune(t *testing.T) {
	check := func(b []byte) {
		r, n := decodeRune(b)
		wr, wn := utf8.DecodeRune(b)
		if r != wr || n != wn {
			t.Fatalf("decodeRune(% x) = %U, %d; utf8.DecodeRune %U, %d", b, r, n, wr, wn)
		}
	}
	for b0 := range 256 {
		check([]byte{byte(b0)})
		for b1 := range 256 {
			check([]byte{byte(b0), byte(b1)})
			if b0 >= 0xE0 && b0 < 0xF0 {
				for _, b2 := range []byte{0x00, 0x7F, 0x80, 0xA5, 0xBF, 0xC0} {
					check([]byte{byte(b0), byte(b1), b2})
				}
			}
		}
	}
}

// TestInfoOf checks the class tables against classify on every rune.
func TestInfoOf(t *testing.T) {
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if got, want := infoOf(r), pack(classify(r)); got != want {
			t.Fatalf("infoOf(%U) = %#x, classify says %#x", r, got, want)
		}
	}
}

// stepOnly feeds s[i:] (plain text, or a JSON string body when json)
// through step alone, one character at a time, classified by classify: the
// replay's definition, which scan's faster readers must reproduce.
func stepOnly(c *Counter, s []byte, i int, json bool) int {
	for i < len(s) {
		var (
			r          rune
			size, ulen int
		)
		switch b := s[i]; {
		case json && b == '"':
			return i
		case json && b < 0x20:
			return -1
		case json && b == '\\':
			if r, size = jsonraw.DecodeEscape(s[i:]); size == 0 {
				return -1
			}
			ulen = utf8.RuneLen(r)
		case b < utf8.RuneSelf:
			r, size, ulen = rune(b), 1, 1
		default:
			r, size = utf8.DecodeRune(s[i:])
			ulen = size
		}
		cls, script, upper, accented := classify(r)
		for !c.step(r, cls, script, upper, accented, ulen, i) {
		}
		i += size
	}
	if json {
		return -1
	}
	return i
}

// traced is one piece as Trace reports it, with the counts so far.
type traced struct {
	feature, end int
	counts       [NumFeatures]uint32
}

func trace(c *Counter) *[]traced {
	var pieces []traced
	c.Trace = func(f, end int) { pieces = append(pieces, traced{f, end, c.feat}) }
	return &pieces
}

// FuzzFastMatchesStep checks that scan (fast, step's runs, the tables) cuts
// any text, plain or as a JSON string, into exactly the pieces step alone
// does, with the same features counted by each piece and the same
// estimate.
func FuzzFastMatchesStep(f *testing.F) {
	for _, s := range []string{"Hello world, it's 2024.\n\n\tfunc main() {}", "日本語のテキスト。Linux系统", `a\u00e9\n\t\"x\"`,
		"\xff\xfe  \n\t x", "\\", "camelCaseWORDs Xy", "don't  (self  \r\n  end.  ", "Съешь же ещё", "नमस्ते",
		`\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002Linux\u7cfb\u7edf \ud840\udc0b\u4e2d \ud840 \u4e2d\uac00`} {
		f.Add([]byte(s))
	}
	f.Fuzz(fastMatchesStep)
}

// eachSample calls check with the text of every checked-in sample, then
// with the same text as the inside of a JSON string (escapes and all).
func eachSample(t *testing.T, check func(text []byte)) {
	t.Helper()
	files, err := filepath.Glob("../../testdata/samples/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var s struct{ Text string }
			if err := json.Unmarshal(line, &s); err != nil {
				t.Fatal(err)
			}
			check([]byte(s.Text))
			escaped, _ := json.Marshal(s.Text)
			check(escaped[1 : len(escaped)-1])
		}
	}
}

// TestFastMatchesStep runs FuzzFastMatchesStep's check on every
// checked-in sample text, and on each as a JSON string.
func TestFastMatchesStep(t *testing.T) {
	eachSample(t, func(text []byte) { fastMatchesStep(t, text) })
}

func fastMatchesStep(t *testing.T, b []byte) {
	var fast, ref Counter
	got, want := trace(&fast), trace(&ref)
	fast.Text(b)
	stepOnly(&ref, b, 0, false)
	ref.End(len(b))
	if !equalTraces(*got, *want) || fast.Estimate() != ref.Estimate() {
		t.Fatalf("plain %q: pieces %v, step alone %v", b, *got, *want)
	}
	quoted := append(append([]byte{'"'}, b...), '"')
	fast, ref = Counter{}, Counter{}
	got, want = trace(&fast), trace(&ref)
	end := fast.JSONString(quoted, 0)
	refEnd := stepOnly(&ref, quoted, 1, true)
	if refEnd >= 0 {
		ref.End(refEnd)
		refEnd++
	}
	if end != refEnd {
		t.Fatalf("JSON %q: JSONString ends at %d, step alone at %d", quoted, end, refEnd)
	}
	if end >= 0 && (!equalTraces(*got, *want) || fast.Estimate() != ref.Estimate()) {
		t.Fatalf("JSON %q: pieces %v, step alone %v", quoted, *got, *want)
	}
}

func equalTraces(a, b []traced) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// blocksMatchStep checks that scan without a Trace (the block reader, fast
// and step) counts exactly the features and function words that step alone
// does, on b as plain text and as a JSON string body, and that both end the
// JSON string at the same offset.
func blocksMatchStep(t *testing.T, b []byte) {
	t.Helper()
	quoted := append(append([]byte{'"'}, b...), '"')
	for _, json := range []bool{false, true} {
		in, start := b, 0
		if json {
			in, start = quoted, 1
		}
		var got, want Counter
		end := got.scan(in, start, json)
		wantEnd := stepOnly(&want, in, start, json)
		if end != wantEnd {
			t.Fatalf("json=%v %q: scan ends at %d, step alone at %d", json, in, end, wantEnd)
		}
		if end < 0 {
			continue
		}
		got.flush(end)
		want.flush(end)
		if !json {
			// The same text fed in three parts at character starts, as
			// renderJSON does: pieces and blocks' open runs go on across
			// parts.
			third, half := len(b)/3, len(b)/2
			for third < len(b) && !utf8.RuneStart(b[third]) {
				third++
			}
			for half < third || half < len(b) && !utf8.RuneStart(b[half]) {
				half++
			}
			var parts Counter
			for _, part := range [][]byte{b[:third], b[third:half], b[half:]} {
				parts.Part(part)
			}
			parts.flush(len(b))
			if parts.feat != want.feat || parts.english != want.english || parts.other != want.other {
				t.Fatalf("%q in three parts: features %v, step %v (words %d/%d, step %d/%d)", b, parts.feat, want.feat, parts.english, parts.other, want.english, want.other)
			}
		}
		if got.feat != want.feat || got.english != want.english || got.other != want.other {
			var diff []string
			for f := range got.feat {
				if got.feat[f] != want.feat[f] {
					diff = append(diff, fmt.Sprintf("%s: %d, step %d", FeatureName(f), got.feat[f], want.feat[f]))
				}
			}
			t.Fatalf("json=%v %q:\n%s\nfunction words %d/%d, step %d/%d", json, in, strings.Join(diff, "\n"),
				got.english, got.other, want.english, want.other)
		}
	}
}

// blockSeeds are texts that exercise the block reader's rules: prefixes,
// punctuation runs of every length, white-space runs with and without
// newlines, digit groups, escapes, and non-ASCII text at block edges.
var blockSeeds = []string{
	"The quick brown fox jumps over the lazy dog, and the cat sat on the mat with all of them.\n\n",
	"func (c *Counter) block(cl *classes) {\n\tif x := a[i]; x > 0 {\n\t\treturn \"quoted\\\\n\" // ok\n\t}\n}\n",
	"der Hund und die Katze sind mit dem Ball auf der Wiese; le chat et la souris, el perro y los gatos.",
	"  (self  \r\n  end.  \t\tword\v\fx \n \n  y;\n\n  z ...... ,,,,,,,,,,,,,abc 1234567 12 1 x1y22z333 ",
	"camelCaseWord XMLHttpRequest iPhone ABC a B cD EfG HIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!",
	"Linux系统，好。The 日本語 text — «quoted» café naïve Ünïcödé and \u00a0nbsp\u3000ideographic space",
	"这条命令开始一个新的事务。如果声明了隔离级别或者读写模式， 那么新事务就使用这个特性（SET TRANSACTION）。",
	"日本語のテキスト、カタカナ・ひらがな、ー「引用」です。한국어 텍스트입니다. 混合Mixed文本123と１２３",
	strings.Repeat("漢字", 30) + "，" + strings.Repeat("カタカナ", 20) + strings.Repeat("한국어", 25) + "abc" + strings.Repeat("中", 50) + "x",

	"a-b_c.d/e:f;g<h>i?j@k[l]m^n`o{p|q}r~s!t\"u#v$w%x&y'z(0)1*2+3,4-5.6/7 8\t9\n0\r",
	// \u escapes of ASCII punctuation, as Go's encoding/json writes '<',
	// '>' and '&', among escapes of other characters
	`if a \u003c b \u0026\u0026 c \u003e= d {\u003cdiv\u003e\u0026amp;\u003C/p\u003E} x\u0027s \u001b[0m \u007f\u0041b\u0030 \u4e2d\u3002 \u00e9t\u00e9`,
	"Ядро поддерживает один объект канала для каждого специального файла; Übersetzung für naïve Öl-Straße «Zitat» 25 °C",
	"Η γλώσσα είναι ελληνική· Ελλάδα; مرحبا بالعالم، كَتَبَ ٣ كتب; שָׁלוֹם עולם ׳ג׳; abcЖдΩωabc Жд中文Жд x\u00a0y\u00a0\u00a0\nz Ա ܐ",
	"नमस्ते दुनिया। यह एक परीक्षण है, १२३ abcनमस्ते; ภาษาไทย เป็นภาษา ที่ใช้ ๑๒ กันมาก; তামিল தமிழ் ಕನ್ನಡ ລາວ ქართ",
	strings.Repeat("नमस्ते", 12) + strings.Repeat("ภาษาไทย", 10) + "x" + strings.Repeat("कख", 20),
	strings.Repeat("Ёж", 40) + " " + strings.Repeat("é", 33) + "x" + strings.Repeat("«»", 20) + strings.Repeat("\u00a0", 20) + "\n",
	`00\000000000000`, `a \u003 b`, `\u003g`, `\u00zz`, `\uu003c`, `\U003c`, `\u0080`, `\u013c`, // malformed, or not ASCII
}

func FuzzBlocksMatchStep(f *testing.F) {
	for _, s := range blockSeeds {
		f.Add([]byte(s))
		f.Add([]byte(strings.Repeat(s, 3)))
	}
	f.Fuzz(blocksMatchStep)
}

// TestBlocksMatchStep runs blocksMatchStep on every checked-in sample, on
// the seeds, and on random texts drawn from the characters the rules turn
// on, at every offset of a block.
func TestBlocksMatchStep(t *testing.T) {
	eachSample(t, func(text []byte) { blocksMatchStep(t, text) })
	for _, s := range blockSeeds {
		for shift := range 64 {
			blocksMatchStep(t, []byte(strings.Repeat("x", shift)+s+s+s))
		}
	}
	const alphabet = "aaaaeeetttAAZz0001999    \t\t\n\n\r\v\f\b..,,;(\"'\\/-_<>&\x1b\x7f" +
		"中中中文字㐀䷀々〇のノーー・한국，，。。「」、（）！\u3000\u3000—“…\u2028é\u00a0Жд😀" +
		// two-byte characters: accented and other Latin letters of both
		// cases, symbols, a combining mark, white space, digits, the
		// alphabets and scripts the bitmaps do not model
		"ééüÜßµªɐʼ×«»©²\u0301\u0085\u0080ЖЖддёЁѣ҂\u0483ααΩάΐ\u0387\u0384ببة،\u064b٣אא׳\u05b0Աܐ" +
		// three-byte letters and marks of Devanagari, Bengali, Tamil,
		// Thai, Lao, Georgian
		"ननमस्तें।१অকதिกกาี่๑ກა" +
		// kana at the edges of the bit-plane test (kanaLeads) and the
		// characters among them that are not kana letters
		"ぁゖ\u3099゛゜ゝゟ゠ァヺヿ\u3040" +
		// Devanagari and Thai at the edges of the bit-plane test
		// (brahmicLeads): letters, marks, dandas, digits, punctuation,
		// unassigned code points, the characters around them, and
		// characters whose bytes differ from theirs in a bit or two
		// (Tibetan, Limbu, Latin)
		"\u0900ःऄहऺ़ऽाॏॐ॑ॗ\u0958ॡॢ।॥०९॰ॱॿ\u08ff\u0980" +
		"\u0e00กฮะัาำฺ\u0e3b\u0e3e฿เๆ็๏๐๙๚๛\u0e5c\u0e7f\u0dff\u0e80ཀᤁḁ"
	var tokens []string
	for _, r := range alphabet {
		tokens = append(tokens, string(r))
	}
	tokens = append(tokens, "\xe4\xb8", "\xff", "\x80", "\xed\xa0\x80", "\xe0\x80\x80") // broken UTF-8
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var plain, escaped strings.Builder
		for range rng.IntN(300) {
			tok := tokens[rng.IntN(len(tokens))]
			plain.WriteString(tok)
			if r, size := utf8.DecodeRuneInString(tok); size == len(tok) && r != utf8.RuneError {
				escaped.WriteString(jsonEscape(r, rng.IntN(4)))
			} else {
				escaped.WriteString(tok)
			}
		}
		blocksMatchStep(t, []byte(plain.String()))
		blocksMatchStep(t, []byte(escaped.String()))
	}
}

// jsonEscape writes r in a JSON string in one of the forms JSON allows:
// form 0 is the shortest, 1 a two-byte escape where there is one, 2 a \u
// escape for any ASCII character (upper-case hex digits for odd ones), 3
// \u escapes for any character (a surrogate pair above U+FFFF), as
// Python's json.dumps writes non-ASCII.
func jsonEscape(r rune, form int) string {
	short := map[rune]string{'"': `\"`, '\\': `\\`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\b': `\b`, '\f': `\f`, '/': `\/`}
	switch {
	case form == 2 && r < utf8.RuneSelf && r&1 != 0:
		return fmt.Sprintf(`\u%04X`, r)
	case form == 2 && r < utf8.RuneSelf || form == 3 && r <= 0xFFFF:
		return fmt.Sprintf(`\u%04x`, r)
	case form == 3:
		hi, lo := utf16.EncodeRune(r)
		return fmt.Sprintf(`\u%04X\u%04x`, hi, lo)
	case short[r] != "" && (form == 1 || r < 0x20 || r == '"' || r == '\\'):
		return short[r]
	case r < 0x20:
		return fmt.Sprintf(`\u%04X`, r)
	}
	return string(r)
}

// TestKinds checks that the block reader classifies every three-byte
// character it models (see multibyte) as classify does: Han found from the
// bit planes, the others by kind3.
func TestKinds(t *testing.T) {
	want := map[uint8]func(cls, script uint8) bool{
		kindPunct:  func(cls, _ uint8) bool { return cls == cOther },
		kindSpace:  func(cls, _ uint8) bool { return cls == cSpace },
		kindHan:    func(cls, script uint8) bool { return cls == cLetter && script == sHan },
		kindKana:   func(cls, script uint8) bool { return cls == cLetter && script == sKana },
		kindHangul: func(cls, script uint8) bool { return cls == cLetter && script == sHangul },
		kindThai:   func(cls, script uint8) bool { return cls == cLetter && script == sThai },
		kindIndic:  func(cls, script uint8) bool { return cls == cLetter && script == sIndic },
	}
	window := make([]byte, windowLen)
	modelledHan := 0
	for r := rune(0x800); r <= 0xFFFF; r++ {
		if r >= 0xD800 && r < 0xE000 {
			continue
		}
		copy(window, strings.Repeat(" ", windowLen))
		utf8.EncodeRune(window, r)
		var cl classes
		n := cl.classify(window, windowLen, false)
		// The same character 21 times over (more than three that are
		// not Han take the bit-plane tests of kanaLeads and
		// brahmicLeads): the same bitmaps, repeated.
		copy(window, strings.Repeat(string(r), 21))
		var many classes
		if m := many.classify(window, windowLen, false); m != n ||
			n == 64 && ((many.han^cl.han)|(many.kana^cl.kana)|(many.hangul^cl.hangul)|(many.thai^cl.thai)|(many.indic^cl.indic)|
				(many.uni^cl.uni)|(many.blank^cl.blank)|(many.cont^cl.cont))&7 != 0 {
			t.Fatalf("%U: alone read %d bytes %+v, 21 times over %d %+v", r, n, cl, m, many)
		}
		cls, script, _, _ := classify(r)
		var kind uint8
		switch {
		case n == 0: // not modelled: the block ends before it
		case cl.han&1 != 0:
			kind = kindHan
			if r >= 0x3400 && r <= 0x9FFF {
				modelledHan++
			}
		case cl.kana&1 != 0:
			kind = kindKana
		case cl.hangul&1 != 0:
			kind = kindHangul
		case cl.thai&1 != 0:
			kind = kindThai
		case cl.indic&1 != 0:
			kind = kindIndic
		case cl.uni&1 != 0:
			kind = kindPunct
		case cl.blank&1 != 0:
			kind = kindSpace
		default:
			t.Fatalf("%U: readable (n=%d) but of no class", r, n)
		}
		if kind != kindNone && (!want[kind](cls, script) || cl.cont&6 != 6 || n != 64) {
			t.Fatalf("%U: block kind %d, classify says class %d script %d (cont %b, n %d)", r, kind, cls, script, cl.cont&7, n)
		}
		if k := kind3(int(r)); kind == kindNone && k != kindNone && !(r >= 0x3400 && r <= 0x9FFF) {
			t.Fatalf("%U: kind3 %d but the block does not read it", r, k)
		}
	}
	if modelledHan != 0x9FFF-0x3400+1-0x40 {
		t.Errorf("%d Han characters read from the bit planes, want all of U+3400–U+9FFF but U+4DC0–U+4DFF", modelledHan)
	}
}

// TestLeadsFromPlanes checks that the bit-plane tests of hangulLeads and
// kanaLeads settle
// exactly the characters they are meant to: every Hangul syllable of
// U+AC00–U+D77F and every kana letter of U+3040–U+30FF, and no other
// three-byte character (TestKinds checks the kinds they give; this, that
// none of those characters is left to the lookup).
func TestLeadsFromPlanes(t *testing.T) {
	window := make([]byte, 64)
	for r := rune(0x800); r <= 0xFFFF; r++ {
		if r >= 0xD800 && r < 0xE000 {
			continue
		}
		for _, at := range []int{0, 20, 61} {
			clear(window)
			utf8.EncodeRune(window[at:], r)
			b0, b1, b2, b3, b4, b5, _, _ := planes(window)
			lead := uint64(1) << at
			wantHangul := r >= 0xAC00 && r <= 0xD77F
			wantKana := r >= 0x3040 && r <= 0x30FF && kind3(int(r)) == kindKana
			if got := hangulLeads(lead, b0, b1, b2, b3, b4, b5) != 0; got != wantHangul {
				t.Fatalf("%U at %d: hangulLeads %v, want %v", r, at, got, wantHangul)
			}
			if got := kanaLeads(lead, b0, b1, b2, b3, b4, b5) != 0; got != wantKana {
				t.Fatalf("%U at %d: kanaLeads %v, want %v", r, at, got, wantKana)
			}
		}
	}
}

// TestBrahmicLeads checks the Devanagari and Thai characters that the block
// reader takes from the bit planes instead of kind3. brahmicLeads, given
// the lead bytes 0xE0 as classify finds them, must mark exactly the
// characters of the ranges its comment lists, each as the kind kind3 gives
// it, among all three-byte sequences (every lead byte 0xE0–0xEF and two
// continuation bytes, overlong forms and surrogates included); and a
// window of one sequence with the lead byte 0xE0 many times over, at each
// offset of its character, must be read as kind3 says.
func TestBrahmicLeads(t *testing.T) {
	settled := [][2]int{{0x0900, 0x0965}, {0x0970, 0x097F}, {0x0E01, 0x0E3A}, {0x0E40, 0x0E4F}}
	window := make([]byte, windowLen)
	seq := func(lead, second, third int) []byte { return []byte{byte(lead), byte(second), byte(third)} }
	rune3 := func(b []byte) int { return int(b[0]&0x0F)<<12 | int(b[1]&0x3F)<<6 | int(b[2]&0x3F) } // as multibyte reads it
	for lead := 0xE0; lead <= 0xEF; lead++ {
		for second := 0x80; second <= 0xBF; second++ {
			for third := 0x80; third <= 0xBF; third++ {
				enc := seq(lead, second, third)
				r := rune3(enc)
				in := false
				for _, s := range settled {
					in = in || lead == 0xE0 && r >= s[0] && r <= s[1]
				}
				for _, at := range []int{0, 20, 61} {
					clear(window)
					copy(window[at:], enc)
					b0, b1, b2, b3, b4, b5, _, _ := planes(window)
					bit := uint64(1) << at
					indic, thai, marks := brahmicLeads(bit&^(b3|b2|b1|b0), b0, b1, b2, b3, b4, b5)
					var got []uint8
					for _, x := range [...]struct {
						kind uint8
						m    uint64
					}{{kindIndic, indic}, {kindThai, thai}, {kindPunct, marks}} {
						if x.m&^bit != 0 {
							t.Fatalf("% x at %d: kind %d marks %x", enc, at, x.kind, x.m)
						}
						if x.m != 0 {
							got = append(got, x.kind)
						}
					}
					if in != (len(got) != 0) || len(got) > 1 || in && got[0] != kind3(r) {
						t.Fatalf("% x (U+%04X, kind %d) at %d: marked as kinds %v, in the ranges %v", enc, r, kind3(r), at, got, in)
					}
				}
			}
		}
	}
	func() {
		three := func(x uint64) uint64 { return x | x<<1 | x<<2 }
		for second := 0x80; second <= 0xBF; second++ {
			for third := 0x80; third <= 0xBF; third++ {
				enc := seq(0xE0, second, third)
				want := kindNone
				if r := rune3(enc); r >= 0x800 {
					want = kind3(r)
				}
				for at := range 3 {
					copy(window, strings.Repeat(" ", windowLen))
					copy(window[at:], bytes.Repeat(enc, (64-at)/3)) // 21 or 20 of them, whole
					var cl classes
					n := cl.classify(window, windowLen, false)
					if want == kindNone {
						if n != at {
							t.Fatalf("% x at %d: read %d bytes, want a stop at the character", enc, at, n)
						}
						continue
					}
					var chars uint64 // the characters' first bytes
					for q := at; q+3 <= 64; q += 3 {
						chars |= 1 << q
					}
					var kinds [numKinds]uint64
					kinds[kindPunct], kinds[kindSpace], kinds[kindHan], kinds[kindKana] = cl.uni, cl.blank, cl.han, cl.kana
					kinds[kindHangul], kinds[kindThai], kinds[kindIndic] = cl.hangul, cl.thai, cl.indic
					for k, m := range kinds[1:] {
						if (uint8(k+1) == want) != (m == three(chars)) || m != three(chars) && m != 0 {
							t.Fatalf("% x at %d (kind %d): kind %d bitmap %x\n%+v", enc, at, want, k+1, m, cl)
						}
					}
					if n != 64 || cl.cont != chars<<1|chars<<2 {
						t.Fatalf("% x at %d: read %d bytes, cont %x", enc, at, n, cl.cont)
					}
				}
			}
		}
	}()
}

// TestKinds2 checks that the block reader classifies every two-byte
// character (U+0080–U+07FF) as classify does, or stops before it: accented
// Latin letters (by case), the letters of the alphabets counted by length,
// punctuation and white space are read, anything else stops the block.
func TestKinds2(t *testing.T) {
	kinds2(t)
}

func kinds2(t *testing.T) {
	window := make([]byte, windowLen)
	read := 0
	for r := rune(0x80); r < 0x800; r++ {
		for _, at := range []int{0, 5, 62} {
			copy(window, strings.Repeat(" ", windowLen))
			utf8.EncodeRune(window[at:], r)
			var cl classes
			n := cl.classify(window, windowLen, false)
			cls, script, upper, accented := classify(r)
			bit := uint64(1) << at
			both := bit | bit<<1
			modelled := cls == cOther || cls == cSpace ||
				cls == cLetter && (script == sLatin && accented || script >= sCyrillic && script <= sHebrew)
			if at == 62 {
				// the character's second byte is the window's last:
				// read as the others are
				if modelled != (n == 64) || !modelled && n != 62 {
					t.Fatalf("%U at 62: read %d bytes", r, n)
				}
			}
			if !modelled {
				if n != at {
					t.Fatalf("%U at %d: read %d bytes, want a stop at the character", r, at, n)
				}
				continue
			}
			if at == 0 {
				read++
			}
			has := func(m uint64) bool { return m&both == both }
			ok := n == 64 && cl.lead2&both == bit && cl.cont&both == bit<<1 && cl.letter&both == 0
			switch {
			case cls == cOther:
				ok = ok && has(cl.uni) && cl.multi&both == 0 && cl.blank&both == 0
			case cls == cSpace:
				ok = ok && has(cl.blank) && cl.uni&both == 0 && cl.multi&both == 0
			case script == sLatin:
				ok = ok && has(cl.latin2) && has(cl.multi) && has(cl.lower2) == !upper && cl.upper&both == bit&-b2u(upper)
			default:
				m := [...]uint64{cl.cyr, cl.greek, cl.arab, cl.hebrew}[script-sCyrillic]
				ok = ok && has(m) && has(cl.multi) && cl.latin2&both == 0 && cl.upper&both == 0
			}
			if !ok {
				t.Fatalf("%U at %d (class %d script %d upper %v accented %v): n %d\n%+v", r, at, cls, script, upper, accented, n, cl)
			}
		}
	}
	if read < 1500 {
		t.Errorf("only %d two-byte characters read", read)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestAlphabets checks the letters that the block reader takes from the
// bit planes instead of kind2Of. alphabets must mark only letters of its
// alphabet, and as many as its comment lists; and a window of one two-byte
// character many times over, at an even and an odd offset, must be read
// as kind2Of says.
func TestAlphabets(t *testing.T) {
	window := make([]byte, windowLen)
	var counts [3]int
	for r := rune(0x80); r < 0x800; r++ {
		enc := utf8.AppendRune(nil, r)
		want := kind2Of[r]
		copy(window, bytes.Repeat(enc, windowLen/2))
		b0, b1, b2, b3, b4, b5, _, _ := planes(window)
		const lead2 = 0x5555555555555555 // every character: bytes 0, 2, 4…
		greek, arab, hebrew := alphabets(lead2, b0, b1, b2, b3, b4, b5)
		for i, m := range [...]uint64{greek, arab, hebrew} {
			if m == 0 {
				continue
			}
			if k := kind2Greek + uint8(i); m != lead2 || want != k {
				t.Fatalf("%U (kind %d): alphabets marks %x as kind %d", r, want, m, k)
			}
			counts[i]++
		}
	}
	// Greek: 0xCE 0x90–0xBF but 0xA2, 0xCF 0x80–0xAF; Arabic: 0xD8
	// 0xA0–0xBF, 0xD9 0x80–0x8A and 0xB1–0xBF, 0xDA, 0xDB 0x80–0x93;
	// Hebrew: 0xD7 0x90–0xAA.
	if want := [...]int{47 + 48, 32 + 11 + 15 + 64 + 20, 27}; counts != want {
		t.Errorf("alphabets marks %v characters (Greek, Arabic, Hebrew), want %v", counts, want)
	}
	func() {
		for r := rune(0x80); r < 0x800; r++ {
			enc := utf8.AppendRune(nil, r)
			want := kind2Of[r]
			for at := range 2 {
				copy(window, strings.Repeat(" ", windowLen))
				copy(window[at:], bytes.Repeat(enc, 32-at))
				var cl classes
				n := cl.classify(window, windowLen, false)
				chars := uint64(0x5555555555555555) << at
				if at == 1 {
					chars &^= 1 << 63 // the 32nd character does not fit
				}
				if want == kind2None {
					if n != at {
						t.Fatalf("%U at %d: read %d bytes, want a stop at the character", r, at, n)
					}
					continue
				}
				all := chars | chars<<1
				var kinds [numKinds2]uint64
				kinds[kind2Punct], kinds[kind2Space] = cl.uni, cl.blank
				kinds[kind2Lower], kinds[kind2Upper] = cl.lower2, cl.latin2&^cl.lower2
				kinds[kind2Cyrillic], kinds[kind2Greek], kinds[kind2Arabic], kinds[kind2Hebrew] = cl.cyr, cl.greek, cl.arab, cl.hebrew
				for k, m := range kinds[1:] {
					if (m == all) != (uint8(k+1) == want) || m != all && m != 0 {
						t.Fatalf("%U at %d (kind %d): kind %d bitmap %x\n%+v", r, at, want, k+1, m, cl)
					}
				}
				if n != 64 || cl.lead2 != chars || cl.cont != chars<<1 {
					t.Fatalf("%U at %d: read %d bytes, lead2 %x, cont %x", r, at, n, cl.lead2, cl.cont)
				}
			}
		}
	}()
}

// TestEscapedKinds checks that the block reader reads the \u escape of
// every character of U+0000–U+FFFF as it reads the character's shortest
// JSON form (raw, or a two-byte escape), or stops at it: each escape of
// ASCII punctuation is read, any other stops the block (step reads runs
// of escaped letters faster than blocks would). The bitmaps of both
// windows must then agree character for character, at offsets across the
// window, the last where the escape's six bytes still fit.
func TestEscapedKinds(t *testing.T) {
	const filler = `xy z1 ab\n` // a letter after the character, and an escape after it
	window := func(prefix int, c string) []byte {
		w := []byte(strings.Repeat("a", prefix) + c + strings.Repeat(filler, windowLen))
		return w[:windowLen]
	}
	read := 0
	for r := rune(0); r <= 0xFFFF; r++ {
		short, long := jsonEscape(r, 0), fmt.Sprintf(`\u%04x`, r)
		if r&1 != 0 {
			long = fmt.Sprintf(`\u%04X`, r)
		}
		modelled := r < utf8.RuneSelf && asciiClass[r] == cOther
		for _, prefix := range []int{0, 1, 7, 31, 53, 57, 58} {
			var a, b classes
			na := a.classify(window(prefix, short), windowLen, true)
			nb := b.classify(window(prefix, long), windowLen, true)
			if !modelled {
				if nb != prefix {
					t.Fatalf("%U at %d: read %d characters, want a stop at the escape (%d)", r, prefix, nb, prefix)
				}
				continue
			}
			if prefix == 0 {
				read++
			}
			// The escape's window ends earlier, its filler cut
			// shorter: compare the characters both read.
			v := uint64(1)<<min(na, nb) - 1
			if min(na, nb) <= prefix || ((a.letter^b.letter)|(a.upper^b.upper)|(a.digit^b.digit)|(a.space^b.space)|(a.blank^b.blank)|
				(a.tab^b.tab)|(a.newline^b.newline)|(a.han^b.han)|(a.kana^b.kana)|(a.hangul^b.hangul)|(a.uni^b.uni)|(a.cont^b.cont))&v != 0 {
				t.Fatalf("%U at %d: %q reads %d characters\n%+v\n%q reads %d\n%+v", r, prefix, short, na, a, long, nb, b)
			}
		}
	}
	if read != 60 { // the ASCII punctuation characters, controls among them
		t.Errorf("%d escapes read, want 60", read)
	}
	for _, s := range []string{`\u003`, `\u003G`, `\u0g3c`, `\uu003c`, `\U003c`} {
		var c classes
		if n := c.classify(window(3, s), windowLen, true); n != 3 {
			t.Errorf("%s read (%d characters), want a stop", s, n)
		}
	}
}

// TestPlanes checks the bit-plane transposition on random windows: bit k
// of plane j is bit j of byte k.
func TestPlanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, windowLen)
	for range 1000 {
		for k := range b {
			b[k] = byte(rng.Uint32())
		}
		b0, b1, b2, b3, b4, b5, b6, b7 := planes(b)
		for j, plane := range [8]uint64{b0, b1, b2, b3, b4, b5, b6, b7} {
			for k := range 64 {
				if got, want := plane>>k&1, uint64(b[k]>>j&1); got != want {
					t.Fatalf("% x: plane %d bit %d = %d, byte %d bit %d = %d", b[:64], j, k, got, k, j, want)
				}
			}
		}
	}
}

// decodedCounts scans the JSON string quoted with decoded allowed or not
// and returns the offset JSONString returned and the counts.
func decodedCounts(quoted []byte, decode bool) (int, [NumFeatures]uint32) {
	defer func(prev bool) { decodeStrings = prev }(decodeStrings)
	decodeStrings = decode
	var c Counter
	end := c.JSONString(quoted, 0)
	return end, *c.Features()
}

// decodedStrings returns JSON string bodies for the comparison of decoded
// with scan's reading of escapes in place: \u escapes of characters of one,
// two, three and four bytes (surrogate pairs), lone surrogates, two-byte
// escapes, raw UTF-8 (valid or not) next to escapes, malformed escapes and
// control bytes, and strings long enough to fill decoded's buffer, with
// every kind of character at each offset around its end.
func decodedStrings() []string {
	strs := []string{`\u00e9t\u00e9`, `\u4e2d\u6587 and \u0440\u0443\u0441`, `\ud83d\ude00 \ud83d x \udc00`,
		`a\u0041\u003c\"\\\/\b\f\n\r\t`, "\u00e9 raw \\u00e9 \xe4\xb8\\u4e2d\xad", `\u00e9\u12`, `\u00e9\x`, "\\u00e9\x01",
		`\u0915\u093f\u0924\u093e\u092c`, `\u0e01\u0e34\u0e19`, `\uAC00\uD7A3\uFFFF\u0800\u07FF\u0080`,
		`\u4e2d\u4E2D\u6587\u6587\u4e2d\ud83d\ude00\u4e2d\u6587\u4e2d\u07ff\u4e2d`, `\u0915\u093f\u0924\u093e\u092c\u0915\u093f\u0924\u093e`}
	// runs of escapes of three-byte characters (decoded in a loop of
	// their own) of every length to ten, each ended in every way
	for run := 1; run <= 10; run++ {
		for _, end := range []string{"", "x", " ", `\n`, `\u00e9`, `\ud800`, `\ud83d\ude00`, `\u0800`, "\xe4\xb8\xad", `\u4e2`, `\u4e2g`} {
			strs = append(strs, strings.Repeat(`\u4e2d`, run)+end+strings.Repeat(`\u6587`, 11-run))
		}
	}
	for _, tail := range []string{`\u00e9`, `\u4e2d`, `\ud83d\ude00`, "\xe4\xb8\xad", "\xe4\xb8", "\x80\x80\x80\x80\x80", `\"`, `\n`, "x", "\xf0\x9f\x98\x80"} {
		for pad := decodeBuf - 24; pad <= decodeBuf+8; pad++ {
			strs = append(strs, `\u00e9`+strings.Repeat("a", pad)+tail+tail+" "+tail)
			strs = append(strs, `\u4e2d`+strings.Repeat(`\u4e2d`, pad/6)+strings.Repeat("b", pad%6)+tail+tail)
		}
	}
	return strs
}

// TestDecodedMatchesEscaped checks that decoded, which decodes a string
// with \u escapes beyond ASCII and scans it as plain text, gives the counts
// and the end that scan gives reading the escapes in place.
func TestDecodedMatchesEscaped(t *testing.T) {
	for _, s := range decodedStrings() {
		checkDecoded(t, []byte(s))
	}
}

func FuzzDecodedMatchesEscaped(f *testing.F) {
	for _, s := range decodedStrings() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecoded(t, b) })
}

func checkDecoded(t *testing.T, b []byte) {
	t.Helper()
	// the string at the end of the body, unterminated or not, and with
	// more of the body after it
	for _, after := range []string{"", `"`, `", "more": "of the body"}`} {
		quoted := append(append([]byte{'"'}, b...), after...)
		endS, featS := decodedCounts(quoted, false)
		{
			endD, featD := decodedCounts(quoted, true)
			if endD != endS || endS >= 0 && featD != featS {
				for i := range featD {
					if featD[i] != featS[i] {
						t.Errorf("%s: decoded %d, in place %d", FeatureName(i), featD[i], featS[i])
					}
				}
				t.Fatalf("%q: decoded ends at %d, in place at %d", quoted, endD, endS)
			}
		}
	}
}
