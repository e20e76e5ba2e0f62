// Package docs keeps the documentation true: the README stays short, every relative
// link and anchor in the Markdown resolves, and the flags and baremetal-ccmctl
// commands the docs name are those the binaries' --help shows.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// root is the module root, relative to this package's directory.
const root = "../.."

// page is one Markdown file, split into what a reader sees as prose and what is in
// fenced code blocks.
type page struct {
	path  string // relative to root, slash-separated
	lines []string
	// prose is the text outside fenced code blocks, lines joined with "\n";
	// fences are the fenced blocks, each with its info string.
	prose  string
	fences []fence
}

type fence struct {
	info string
	body string
}

var fenceRE = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")

func readPage(rel string) (*page, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	p := &page{path: rel, lines: strings.Split(string(data), "\n")}
	var prose []string
	var open string // the fence's marker while inside one
	var cur fence
	var body []string
	for _, l := range p.lines {
		if open == "" {
			if m := fenceRE.FindStringSubmatch(l); m != nil {
				open, cur, body = m[1], fence{info: m[2]}, nil
				prose = append(prose, "")
				continue
			}
			prose = append(prose, l)
			continue
		}
		if t := strings.TrimSpace(l); strings.HasPrefix(t, open) && strings.Trim(t, open[:1]) == "" {
			cur.body = strings.Join(body, "\n")
			p.fences = append(p.fences, cur)
			open = ""
			prose = append(prose, "")
			continue
		}
		body = append(body, l)
		prose = append(prose, "")
	}
	if open != "" { // an unclosed fence swallows the rest of the page on GitHub
		cur.body = strings.Join(body, "\n")
		cur.info = "UNCLOSED"
		p.fences = append(p.fences, cur)
	}
	p.prose = strings.Join(prose, "\n")
	return p, nil
}

// markdownFiles lists the repository's Markdown files (relative, slash-separated),
// leaving out hidden directories and test data.
func markdownFiles() ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}

var (
	headingRE  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkTextRE = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]*)(?:\s+"[^"]*")?\)`)
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
)

// anchors returns the GitHub anchors of a page's headings: the heading's text
// (links as their text, code spans without backticks) lowercased, every character
// that is not a letter, digit, space, '-' or '_' dropped, spaces turned into '-';
// a repeated anchor gets -1, -2, ...
func (p *page) anchors() map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(p.prose, "\n") {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := anchor(m[2])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func anchor(heading string) string {
	text := linkTextRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// link is a Markdown link in a page's prose.
type link struct {
	text, target string
	line         int
}

// links returns the page's links outside code blocks and code spans (link text may
// span lines).
func (p *page) links() []link {
	// Blank out code spans (keeping newlines, so line numbers stay right).
	prose := codeSpanRE.ReplaceAllStringFunc(p.prose, func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, s)
	})
	var out []link
	for _, m := range linkTextRE.FindAllStringSubmatchIndex(prose, -1) {
		out = append(out, link{
			text:   prose[m[2]:m[3]],
			target: prose[m[4]:m[5]],
			line:   strings.Count(prose[:m[0]], "\n") + 1,
		})
	}
	return out
}

// codeSpans returns the page's inline code spans (their content), outside fenced
// blocks; a span may run over a line break, which becomes a space.
func (p *page) codeSpans() []string {
	var out []string
	for _, s := range codeSpanRE.FindAllString(p.prose, -1) {
		s = strings.Trim(s, "`")
		out = append(out, strings.Join(strings.Fields(s), " "))
	}
	return out
}
