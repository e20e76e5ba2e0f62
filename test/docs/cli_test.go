package docs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const (
	ccmctl = "baremetal-ccmctl"
	ccm    = "baremetal-cloud-controller-manager"
)

// foreignFlags are flags the docs name in a code span of their own (not in a command
// line) that belong to another program than ours, with that program.
var foreignFlags = map[string]string{
	"node-ip":     "the kubelet",
	"provider-id": "the kubelet",
	"rootfs":      "hack/image.sh",
	"lb-class":    "MetalLB's controller and speaker",
}

// ourPrograms are the first words of the command lines the docs check.
var ourPrograms = map[string]bool{ccmctl: true, "kubectl-baremetal": true, ccm: true}

// cli is what the binaries' --help says.
type cli struct {
	ccmFlags   map[string]bool // baremetal-cloud-controller-manager --help: every flag
	ownFlags   map[string]bool // ... the flags this project adds ("Baremetal agent flags")
	agentFlags map[string]bool // baremetal-cloud-controller-manager agent --help
	// ctl maps each baremetal-ccmctl subcommand ("manifests static-pod") to its flags
	ctl map[string]map[string]bool
}

var (
	cliOnce sync.Once
	cliInfo *cli
	cliErr  string
	binDir  string // where the binaries are built; removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// help builds both binaries once and reads their --help.
func help(t *testing.T) *cli {
	t.Helper()
	cliOnce.Do(func() {
		cliInfo, cliErr = readHelp()
	})
	if cliErr != "" {
		t.Fatal(cliErr)
	}
	return cliInfo
}

var (
	goFlagRE    = regexp.MustCompile(`(?m)^  -([a-zA-Z][a-zA-Z0-9-]*)(?: |$)`)            // flag.PrintDefaults
	pflagRE     = regexp.MustCompile(`(?m)^\s+(?:-[a-zA-Z], )?--([a-zA-Z][a-zA-Z0-9-]*)`) // cobra/pflag help
	usageFlagRE = regexp.MustCompile(`\[--?([a-zA-Z][a-zA-Z0-9-]*)|\s--([a-zA-Z][a-zA-Z0-9-]*)`)
	sectionRE   = regexp.MustCompile(`(?m)^(\S.*) flags:$`)
	ctlUsageRE  = regexp.MustCompile(`(?m)^  ` + ccmctl + ` (.*)$`)
)

func readHelp() (*cli, string) {
	dir, err := os.MkdirTemp("", "docs-test-bin-")
	if err != nil {
		return nil, err.Error()
	}
	binDir = dir
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, "the go command is needed to build the binaries: " + err.Error()
	}
	build := exec.Command(goTool, "build", "-o", dir+string(os.PathSeparator), "./cmd/"+ccmctl, "./cmd/"+ccm)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, "go build: " + err.Error() + "\n" + string(out)
	}
	run := func(stderrOnly bool, bin string, args ...string) string {
		cmd := exec.Command(filepath.Join(dir, bin), args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Env = append(os.Environ(), "NODE_NAME=docs-test")
		_ = cmd.Run() // usage exits 2
		if stderrOnly {
			return stderr.String()
		}
		return stdout.String() + stderr.String()
	}
	c := &cli{ccmFlags: map[string]bool{}, ownFlags: map[string]bool{}, agentFlags: map[string]bool{}, ctl: map[string]map[string]bool{}}

	h := run(false, ccm, "--help")
	for _, m := range pflagRE.FindAllStringSubmatch(h, -1) {
		c.ccmFlags[m[1]] = true
	}
	sections := sectionRE.FindAllStringSubmatchIndex(h, -1)
	for i, s := range sections {
		if h[s[2]:s[3]] != "Baremetal agent" {
			continue
		}
		end := len(h)
		if i+1 < len(sections) {
			end = sections[i+1][0]
		}
		for _, m := range pflagRE.FindAllStringSubmatch(h[s[1]:end], -1) {
			c.ownFlags[m[1]] = true
		}
	}
	if len(c.ccmFlags) < 50 || len(c.ownFlags) == 0 {
		return nil, ccm + " --help: found " + strconv.Itoa(len(c.ccmFlags)) + " flags, " + strconv.Itoa(len(c.ownFlags)) + " of them under \"Baremetal agent flags\":\n" + h
	}

	h = run(false, ccm, "agent", "--help")
	for _, m := range goFlagRE.FindAllStringSubmatch(h, -1) {
		c.agentFlags[m[1]] = true
	}
	if !c.agentFlags["cloud-config"] {
		return nil, ccm + " agent --help shows no --cloud-config:\n" + h
	}

	// baremetal-ccmctl without arguments prints its usage: one line per subcommand,
	// its flags in [--flag X], continued on indented lines.
	usage := run(true, ccmctl)
	lines := strings.Split(usage, "\n")
	for i, l := range lines {
		m := ctlUsageRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var words []string
		for _, w := range strings.Fields(m[1]) {
			if !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w) {
				break
			}
			words = append(words, w)
		}
		sub := strings.Join(words, " ")
		flags := c.ctl[sub]
		if flags == nil {
			flags = map[string]bool{}
			c.ctl[sub] = flags
		}
		text := m[1]
		for j := i + 1; j < len(lines) && strings.HasPrefix(lines[j], "        ["); j++ {
			text += " " + lines[j]
		}
		for _, f := range usageFlagRE.FindAllStringSubmatch(" "+text, -1) {
			flags[f[1]+f[2]] = true
		}
	}
	if len(c.ctl) < 5 {
		return nil, ccmctl + ": found " + strconv.Itoa(len(c.ctl)) + " subcommands in its usage:\n" + usage
	}
	for sub, flags := range c.ctl {
		h := run(true, ccmctl, append(strings.Fields(sub), "-h")...)
		for _, m := range goFlagRE.FindAllStringSubmatch(h, -1) {
			flags[m[1]] = true
		}
		for _, m := range usageFlagRE.FindAllStringSubmatch(h, -1) {
			flags[m[1]+m[2]] = true
		}
	}
	return c, ""
}

// docPages are the pages whose commands and flags are checked: the README and docs/.
func docPages(t *testing.T) []*page {
	t.Helper()
	files, err := markdownFiles()
	if err != nil {
		t.Fatal(err)
	}
	var out []*page
	for _, f := range files {
		if f != "README.md" && !strings.HasPrefix(f, "docs/") {
			continue
		}
		p, err := readPage(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// commands splits shell text into simple commands (continuation lines joined,
// comments dropped, split at pipes, &&, ;, and command substitutions), each as its
// words.
func commands(text string) [][]string {
	text = strings.ReplaceAll(text, "\\\n", " ")
	var out [][]string
	for _, line := range strings.Split(text, "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, seg := range regexp.MustCompile(`\||&&|;|\$\(|\)`).Split(line, -1) {
			if w := strings.Fields(seg); len(w) > 0 {
				out = append(out, w)
			}
		}
	}
	return out
}

var flagWordRE = regexp.MustCompile(`^--?([a-zA-Z][a-zA-Z0-9-]*)(?:=.*)?$`)

// checkCommand checks one command line of ours against --help; it returns problems.
func (c *cli) checkCommand(words []string) []string {
	for len(words) > 0 && (strings.Contains(words[0], "=") || words[0] == "sudo") {
		words = words[1:] // VAR=value, sudo
	}
	if len(words) >= 2 && words[0] == "kubectl" && words[1] == "baremetal" {
		words = append([]string{ccmctl}, words[2:]...)
	}
	if len(words) == 0 || !ourPrograms[filepath.Base(words[0])] {
		return nil
	}
	prog := filepath.Base(words[0])
	args := words[1:]
	var flags, after map[string]bool // flags before and after a bare --
	var name, afterName string
	switch {
	case prog == ccm && len(args) > 0 && args[0] == "agent":
		flags, name, args = c.agentFlags, ccm+" agent", args[1:]
	case prog == ccm:
		flags, name = c.ccmFlags, ccm
	default:
		best := ""
		for sub := range c.ctl {
			w := strings.Fields(sub)
			if len(w) <= len(args) && slices.Equal(w, args[:len(w)]) && len(sub) > len(best) {
				best = sub
			}
		}
		if best == "" {
			if len(args) == 0 {
				return nil // the program named alone
			}
			return []string{"`" + strings.Join(words, " ") + "`: " + ccmctl + " has no such subcommand (see its usage)"}
		}
		flags, name, args = c.ctl[best], ccmctl+" "+best, args[len(strings.Fields(best)):]
		switch best {
		case "manifests static-pod", "manifests deployment":
			after, afterName = c.ccmFlags, ccm
		case "manifests agent-daemonset":
			after, afterName = c.agentFlags, ccm+" agent"
		}
	}
	var problems []string
	for _, a := range args {
		if a == "--" {
			if after == nil {
				break
			}
			flags, name, after = after, afterName, nil
			continue
		}
		m := flagWordRE.FindStringSubmatch(a)
		if m == nil {
			continue
		}
		if !flags[m[1]] {
			problems = append(problems, "`"+strings.Join(words, " ")+"`: "+name+" has no flag --"+m[1])
		}
	}
	return problems
}

// TestDocumentedFlagsExist: every flag the README and docs/ name exists. Command
// lines of ours (in code blocks and code spans: baremetal-ccmctl SUBCOMMAND,
// kubectl baremetal, baremetal-cloud-controller-manager [agent]) are checked against
// that command's --help, arguments after a bare -- against the CCM's or the agent's;
// a code span that is only flags (`--kube-api-qps=500`) against all of ours, unless
// foreignFlags names its program. Command lines of other programs are not checked.
func TestDocumentedFlagsExist(t *testing.T) {
	c := help(t)
	all := map[string]bool{}
	for _, m := range []map[string]bool{c.ccmFlags, c.agentFlags} {
		for f := range m {
			all[f] = true
		}
	}
	for _, m := range c.ctl {
		for f := range m {
			all[f] = true
		}
	}
	checked := 0
	for _, p := range docPages(t) {
		var cmds [][]string
		for _, f := range p.fences {
			switch f.info {
			case "", "sh", "bash", "shell", "console":
				cmds = append(cmds, commands(f.body)...)
			}
		}
		for _, span := range p.codeSpans() {
			if strings.HasPrefix(span, "--") {
				for _, w := range strings.Fields(span) {
					m := flagWordRE.FindStringSubmatch(w)
					if m == nil || !strings.HasPrefix(w, "--") {
						continue
					}
					checked++
					if !all[m[1]] && foreignFlags[m[1]] == "" {
						t.Errorf("%s: `%s`: no binary of ours has --%s (if it is another program's, add it to foreignFlags)", p.path, span, m[1])
					}
				}
				continue
			}
			cmds = append(cmds, commands(span)...)
		}
		for _, words := range cmds {
			if len(words) > 0 && (ourPrograms[filepath.Base(words[0])] || (len(words) > 1 && words[0] == "kubectl" && words[1] == "baremetal")) {
				checked++
			}
			for _, problem := range c.checkCommand(words) {
				t.Errorf("%s: %s", p.path, problem)
			}
		}
	}
	if checked < 40 {
		t.Errorf("only %d flags and command lines checked: is the parser broken?", checked)
	}
	for f, prog := range foreignFlags {
		if all[f] {
			t.Errorf("foreignFlags names --%s as %s's, but a binary of ours has it: remove it there", f, prog)
		}
	}
}

// docsText is the README and docs/ as one text, whitespace runs as single spaces.
func docsText(t *testing.T) string {
	var b strings.Builder
	for _, p := range docPages(t) {
		b.WriteString(strings.Join(p.lines, "\n"))
		b.WriteString("\n")
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// TestCCMCtlCommandsDocumented: every subcommand baremetal-ccmctl's usage lists is
// shown in the README or docs/ (as `baremetal-ccmctl SUB` or `kubectl baremetal SUB`).
func TestCCMCtlCommandsDocumented(t *testing.T) {
	c := help(t)
	text := docsText(t)
	var subs []string
	for sub := range c.ctl {
		subs = append(subs, sub)
	}
	sort.Strings(subs)
	for _, sub := range subs {
		if !strings.Contains(text, ccmctl+" "+sub) && !strings.Contains(text, "kubectl baremetal "+sub) {
			t.Errorf("`%s %s` is not documented in README.md or docs/", ccmctl, sub)
		}
	}
}

// TestOwnFlagsDocumented: the flags this project adds to the upstream CCM command
// (its "Baremetal agent flags") and every flag of the agent mode are documented
// (as `--flag` in the README or docs/); the upstream flags are the upstream's to
// document.
func TestOwnFlagsDocumented(t *testing.T) {
	c := help(t)
	text := docsText(t)
	for what, flags := range map[string]map[string]bool{ccm: c.ownFlags, ccm + " agent": c.agentFlags} {
		for f := range flags {
			if !regexp.MustCompile("`--" + regexp.QuoteMeta(f) + "[`= ]").MatchString(text) {
				t.Errorf("%s --%s is not documented in README.md or docs/ (as `--%s`)", what, f, f)
			}
		}
	}
}
