package calib

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A Source is a set of installed files that yield text of one class.
type Source struct {
	Globs   []string            // file patterns (filepath.Glob, plus "**/" for a recursive walk)
	Exclude string              // base-name pattern of files to leave out
	Extract func([]byte) string // file content → plain text
}

// manGlobs lists the installed manual pages of one language directory.
func manGlobs(lang string) []string {
	var g []string
	for _, sec := range []string{"1", "5", "7", "8"} {
		g = append(g, filepath.Join("/usr/share/man", lang, "man"+sec, "*.gz"))
	}
	return g
}

// Sources maps each text class to where its text comes from on a Debian
// machine with the packages named in BENCHMARKS.md (token estimation) installed. A
// class with several sources draws from each in turn.
func Sources() map[string][]Source {
	man := func(lang string) Source { return Source{Globs: manGlobs(lang), Extract: manText} }
	mo := func(lang string) Source {
		return Source{Globs: []string{filepath.Join("/usr/share/locale", lang, "LC_MESSAGES", "*.mo")}, Extract: moText}
	}
	file := func(globs ...string) Source { return Source{Globs: globs, Extract: anyText} }
	source := func(b []byte) string { return string(b) }
	return map[string][]Source{
		// gcloud's thousands of generated pages would crowd out the prose.
		ClassEnglish: {{Globs: manGlobs(""), Exclude: "gcloud*", Extract: manText},
			file("/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz", "/usr/share/doc/man-db/man-db-manual.txt.gz",
				"/usr/share/doc/libpng16-16/libpng-manual.txt.gz", "/usr/share/doc/git/RelNotes/*.txt")},
		ClassGerman:   {man("de")},
		ClassRussian:  {man("ru")},
		ClassChinese:  {man("zh_CN")},
		ClassJapanese: {man("ja")},
		ClassKorean:   {man("ko"), file("/usr/share/doc/debian/FAQ/debian-faq.ko.txt.gz")},
		ClassCode: {
			{Globs: []string{filepath.Join(runtime.GOROOT(), "src") + "/**/*.go"}, Extract: source},
			{Globs: []string{"/usr/lib/python3.11/**/*.py"}, Extract: source},
			{Globs: []string{"/usr/include/**/*.h"}, Extract: source},
		},
		ClassOtherLatin: {man("fr"), man("es"), man("it"), man("pt"), man("nl")},
		ClassGreek:      {man("el"), mo("el")},
		ClassArabic:     {mo("ar")},
		ClassHebrew:     {mo("he")},
		ClassThai:       {mo("th")},
		ClassHindi:      {mo("hi")},
	}
}

// Files expands a source's patterns into a sorted list of readable files.
func (s Source) Files() []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range s.Globs {
		var matches []string
		if root, pat, ok := strings.Cut(g, "/**/"); ok {
			roots, _ := filepath.Glob(root)
			for _, r := range roots {
				_ = filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
					if err != nil {
						return nil
					}
					if d.IsDir() && (d.Name() == "testdata" || d.Name() == "test" || d.Name() == "tests") {
						return filepath.SkipDir
					}
					if ok, _ := filepath.Match(pat, d.Name()); ok && !d.IsDir() {
						matches = append(matches, p)
					}
					return nil
				})
			}
		} else {
			matches, _ = filepath.Glob(g)
		}
		for _, m := range matches {
			if skip, _ := filepath.Match(s.Exclude, filepath.Base(m)); skip && s.Exclude != "" {
				continue
			}
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	sort.Strings(out)
	return out
}

// IsTestFile says whether a file is reserved for the checked-in samples
// (one in four, by a hash of its path) rather than for fitting the weights,
// so that the accuracy report measures text the fit has not seen.
func IsTestFile(path string) bool {
	h := fnv.New32a()
	h.Write([]byte(path))
	return h.Sum32()%4 == 0
}

// ReadText reads and extracts one file, un-gzipping it when needed; it
// returns "" for files that are not valid UTF-8 text.
func (s Source) ReadText(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return ""
		}
		if b, err = io.ReadAll(io.LimitReader(zr, 8<<20)); err != nil {
			return ""
		}
	}
	t := s.Extract(b)
	if !utf8.ValidString(t) {
		return ""
	}
	return t
}

func anyText(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte{0xde, 0x12, 0x04, 0x95}), bytes.HasPrefix(b, []byte{0x95, 0x04, 0x12, 0xde}):
		return moText(b)
	case bytes.Contains(b[:min(len(b), 512)], []byte("<html")), bytes.Contains(b[:min(len(b), 512)], []byte("<!DOCTYPE")):
		return htmlText(b)
	case bytes.HasPrefix(b, []byte(".")), bytes.HasPrefix(b, []byte("'\\\"")):
		return manText(b)
	}
	return string(b)
}

// manText turns troff man-page source into plain paragraphs: requests are
// dropped (section headings kept), font and character escapes removed, and
// the lines of a paragraph joined.
func manText(b []byte) string {
	src := string(b)
	if strings.HasPrefix(src, ".so ") {
		return "" // a link to another page
	}
	var out strings.Builder
	var para []string
	flush := func() {
		if len(para) > 0 {
			out.WriteString(joinLines(para))
			out.WriteString("\n\n")
			para = para[:0]
		}
	}
	noFill := false
	inTable := false
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
			req, args, _ := strings.Cut(strings.TrimLeft(line[1:], " \t"), " ")
			switch req {
			case "TS":
				inTable = true
			case "TE":
				inTable = false
			case "nf", "EX":
				flush()
				noFill = true
			case "fi", "EE":
				flush()
				noFill = false
			case "SH", "SS":
				flush()
				para = append(para, unescapeTroff(strings.Trim(args, "\"")))
				flush()
			case "PP", "P", "LP", "TP", "sp", "br", "RS", "RE", "HP":
				flush()
			case "IP":
				flush()
				if a := unescapeTroff(strings.Trim(args, "\" ")); a != "" {
					para = append(para, a)
				}
			case "B", "I", "SM", "SB":
				para = append(para, unescapeTroff(strings.ReplaceAll(args, "\"", "")))
			case "BR", "BI", "IR", "IB", "RB", "RI":
				para = append(para, unescapeTroff(strings.ReplaceAll(strings.Join(strings.Fields(args), ""), "\"", "")))
			}
			continue
		}
		if inTable {
			continue
		}
		t := unescapeTroff(line)
		if noFill {
			para = append(para, t)
			out.WriteString(t)
			out.WriteString("\n")
			para = para[:0]
			continue
		}
		if strings.TrimSpace(t) == "" {
			flush()
			continue
		}
		para = append(para, strings.TrimSpace(t))
	}
	flush()
	return strings.TrimSpace(out.String())
}

// joinLines joins the lines of a filled paragraph: with a space between
// Latin text, without one between CJK characters (which use no spaces).
func joinLines(lines []string) string {
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			prev, _ := utf8.DecodeLastRuneInString(lines[i-1])
			next, _ := utf8.DecodeRuneInString(l)
			if !(isWide(prev) && isWide(next)) {
				b.WriteByte(' ')
			}
		}
		b.WriteString(l)
	}
	return b.String()
}

func isWide(r rune) bool { return r >= 0x2E80 && r < 0xFFEF }

var troffEscape = regexp.MustCompile(`\\(f(\[[^\]]*\]|\(..|.)|s[-+]?[0-9]|\*(\[[^\]]*\]|\(..|.)|\(..|\[[^\]]*\]|.)`)

var troffChars = map[string]string{
	`\-`: "-", `\e`: `\`, `\\`: `\`, `\ `: " ", `\~`: " ", `\(em`: "—", `\(en`: "–",
	`\(aq`: "'", `\(dq`: `"`, `\(lq`: "“", `\(rq`: "”", `\(bu`: "•", `\(co`: "©",
	`\(oq`: "‘", `\(cq`: "’", `\(ti`: "~", `\(ha`: "^", `\(rs`: `\`, `\[em]`: "—",
	`\[aq]`: "'", `\[dq]`: `"`, `\[lq]`: "“", `\[rq]`: "”", `\[bu]`: "•", `\(Fo`: "«", `\(Fc`: "»",
	`\(>=`: "≥", `\(<=`: "≤", `\(mu`: "×", `\(de`: "°", `\(ua`: "↑", `\(da`: "↓", `\(->`: "→",
}

func unescapeTroff(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	if i := strings.Index(s, `\"`); i >= 0 {
		s = s[:i] // comment
	}
	return troffEscape.ReplaceAllStringFunc(s, func(m string) string {
		if r, ok := troffChars[m]; ok {
			return r
		}
		return ""
	})
}

var (
	htmlTag    = regexp.MustCompile(`(?s)<(script|style)[^>]*>.*?</(script|style)>|<[^>]*>`)
	htmlEntity = regexp.MustCompile(`&(#[0-9]+|#x[0-9a-fA-F]+|[a-z]+);`)
	blankLines = regexp.MustCompile(`\n[ \t]*\n[\s]*`)
	spaceRuns  = regexp.MustCompile(`[ \t]+`)
)

func htmlText(b []byte) string {
	s := htmlTag.ReplaceAllString(string(b), "")
	s = htmlEntity.ReplaceAllStringFunc(s, func(m string) string {
		name := m[1 : len(m)-1]
		switch name {
		case "amp":
			return "&"
		case "lt":
			return "<"
		case "gt":
			return ">"
		case "quot":
			return `"`
		case "nbsp":
			return " "
		}
		if strings.HasPrefix(name, "#x") {
			if n, err := strconv.ParseUint(name[2:], 16, 32); err == nil {
				return string(rune(n))
			}
		} else if strings.HasPrefix(name, "#") {
			if n, err := strconv.ParseUint(name[1:], 10, 32); err == nil {
				return string(rune(n))
			}
		}
		return ""
	})
	s = spaceRuns.ReplaceAllString(s, " ")
	s = blankLines.ReplaceAllString(s, "\n\n")
	return strings.TrimSpace(s)
}

// moText returns the translated messages of a GNU gettext .mo catalogue,
// one paragraph each.
func moText(b []byte) string {
	msgs, err := moStrings(b)
	if err != nil {
		return ""
	}
	return strings.Join(msgs, "\n\n")
}

func moStrings(b []byte) ([]string, error) {
	if len(b) < 28 {
		return nil, errors.New("short .mo")
	}
	var order binary.ByteOrder = binary.LittleEndian
	switch order.Uint32(b) {
	case 0x950412de:
	case 0xde120495:
		order = binary.BigEndian
	default:
		return nil, errors.New("not a .mo file")
	}
	n := int(order.Uint32(b[8:]))
	tr := int(order.Uint32(b[16:]))
	var out []string
	for i := 1; i < n; i++ { // entry 0 is the header
		o := tr + 8*i
		if o+8 > len(b) {
			break
		}
		l, off := int(order.Uint32(b[o:])), int(order.Uint32(b[o+4:]))
		if off+l > len(b) {
			break
		}
		for _, m := range strings.Split(string(b[off:off+l]), "\x00") {
			if m = strings.TrimSpace(m); m != "" {
				out = append(out, m)
			}
		}
	}
	return out, nil
}
