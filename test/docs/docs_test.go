package docs

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxREADMELines bounds the README: what it is, the two commands, the capability
// table and where to go next; everything else lives in docs/.
const maxREADMELines = 300

// TestREADMEIsShort: the README stays under 300 lines.
func TestREADMEIsShort(t *testing.T) {
	p, err := readPage("README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := len(p.lines)
	if p.lines[n-1] == "" {
		n--
	}
	if n >= maxREADMELines {
		t.Errorf("README.md has %d lines, want fewer than %d: move the detail to a page under docs/ and link it", n, maxREADMELines)
	}
}

// TestREADMEStartsWithTheCommands: a newcomer's first two commands open the README.
func TestREADMEStartsWithTheCommands(t *testing.T) {
	p, err := readPage("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.fences) == 0 || !strings.HasPrefix(p.fences[0].body, "make demo") || !strings.Contains(p.fences[0].body, "\nmake test") {
		t.Errorf("the README's first code block should be `make demo` and `make test`")
	}
}

// TestLinks: every relative link in the repository's Markdown resolves to a file or
// directory in the repository, and every #anchor to a heading of the Markdown file
// it names (GitHub's anchors).
func TestLinks(t *testing.T) {
	files, err := markdownFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "docs/install.md", "docs/configuration.md", "docs/operations.md", "docs/development.md", "docs/metallb.md"} {
		found := false
		for _, f := range files {
			found = found || f == want
		}
		if !found {
			t.Errorf("%s is missing", want)
		}
	}
	pages := map[string]*page{}
	load := func(rel string) *page {
		if p, ok := pages[rel]; ok {
			return p
		}
		p, err := readPage(rel)
		if err != nil {
			t.Fatal(err)
		}
		pages[rel] = p
		return p
	}
	checked := 0
	for _, f := range files {
		p := load(f)
		for _, l := range p.links() {
			target := l.target
			if target == "" || regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) {
				continue // absolute URL (https:, mailto:)
			}
			checked++
			where := f + ":" + strconv.Itoa(l.line) + ": [" + strings.Join(strings.Fields(l.text), " ") + "](" + target + ")"
			file, frag, _ := strings.Cut(target, "#")
			dest := f
			if file != "" {
				if strings.HasPrefix(file, "/") {
					t.Errorf("%s: use a path relative to the page", where)
					continue
				}
				dest = path.Clean(path.Join(path.Dir(f), file))
				if dest == ".." || strings.HasPrefix(dest, "../") {
					t.Errorf("%s: points outside the repository", where)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
					t.Errorf("%s: %s does not exist", where, dest)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if !load(dest).anchors()[frag] {
				t.Errorf("%s: %s has no heading with the anchor #%s", where, dest, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked: is the link parser broken?", checked)
	}
}

// TestFencesClosed: no Markdown page leaves a code block open (GitHub would show the
// rest of the page as code, headings included, until a bare fence closes it).
func TestFencesClosed(t *testing.T) {
	files, err := markdownFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		p, err := readPage(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.fences {
			if c.info == "UNCLOSED" {
				t.Errorf("%s: a code block is not closed: %.80q", f, c.body)
			}
			// A fence with an info string cannot close a block: inside one, it
			// means the block before it was not closed.
			for _, l := range strings.Split(c.body, "\n") {
				if m := fenceRE.FindStringSubmatch(l); m != nil && m[2] != "" {
					t.Errorf("%s: a code block contains %q: is the block before it closed?", f, l)
				}
			}
		}
	}
}

// TestCapabilityTable: the README's capability table has rows, and every row links
// to the section of docs/ that describes it (TestLinks checks the anchors exist).
func TestCapabilityTable(t *testing.T) {
	p, err := readPage("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	in := false
	for i, l := range p.lines {
		if strings.HasPrefix(l, "| capability |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(l, "|---") {
			continue
		}
		if !strings.HasPrefix(l, "|") {
			break
		}
		rows++
		ok := false
		for _, m := range linkTextRE.FindAllStringSubmatch(l, -1) {
			ok = ok || strings.HasPrefix(m[2], "docs/")
		}
		if !ok {
			t.Errorf("README.md:%d: the capability row links to no page under docs/: %s", i+1, l)
		}
	}
	if rows < 20 {
		t.Errorf("the README's capability table (| capability | ...) has %d rows; every capability should have one", rows)
	}
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"CloudConfig (`--cloud-config`)":               "cloudconfig---cloud-config",
		"1. Credentials and RBAC (both ways)":          "1-credentials-and-rbac-both-ways",
		"The proof: the image under real kubelets":     "the-proof-the-image-under-real-kubelets",
		"Load balancers (`loadBalancer`)":              "load-balancers-loadbalancer",
		"What a BMC error means":                       "what-a-bmc-error-means",
		"[Linked](x.md) heading_with_underscore":       "linked-heading_with_underscore",
		"2b. As a systemd service from the deb or rpm": "2b-as-a-systemd-service-from-the-deb-or-rpm",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestMakeTargetsExist: every `make TARGET` the docs show (in code) is a target of
// the Makefile.
func TestMakeTargetsExist(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):`).FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	makeRE := regexp.MustCompile(`(?:^|[\s;|&(])make ([a-z][a-z0-9-]*)`)
	checked := 0
	for _, p := range docPages(t) {
		code := p.codeSpans()
		for _, f := range p.fences {
			code = append(code, f.body)
		}
		for _, c := range code {
			for _, m := range makeRE.FindAllStringSubmatch(c, -1) {
				checked++
				if !targets[m[1]] {
					t.Errorf("%s: `make %s`: the Makefile has no target %s", p.path, m[1], m[1])
				}
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d make commands found: is the parser broken?", checked)
	}
}
