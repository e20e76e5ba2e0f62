package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/baremetal-ccm/baremetal-ccm/internal/strictyaml"
)

// Spec describes an image: its run-time configuration and its layers, bottom first.
// packaging/image/image.yaml is the CCM's.
type Spec struct {
	Config Config `json:"config"`
	// Debian says how Debian packages become files: what to leave out and which
	// dependencies are not needed at run time.
	Debian Debian  `json:"debian,omitempty"`
	Layers []Layer `json:"layers"`
}

// Config is the run-time part of the OCI image configuration.
type Config struct {
	Entrypoint []string          `json:"entrypoint"`
	Cmd        []string          `json:"cmd,omitempty"`
	Env        []string          `json:"env,omitempty"`
	User       string            `json:"user,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// Debian holds the rules for package contents.
type Debian struct {
	// PathExclude and PathInclude are dpkg's path-exclude and path-include filters
	// (dpkg.cfg(5): shell globs where * also matches /; an include wins over an
	// exclude). A directory whose contents are partly kept is kept.
	PathExclude []string `json:"pathExclude,omitempty"`
	PathInclude []string `json:"pathInclude,omitempty"`
	// IgnoreDepends maps a package name that some package depends on, but that is not
	// in the image, to the reason it is not needed (usually: only maintainer scripts
	// use it, and they never run in an image). Any other unmet dependency fails the
	// build.
	IgnoreDepends map[string]string `json:"ignoreDepends,omitempty"`
}

// Layer is one filesystem layer.
type Layer struct {
	// Name is for humans (the history and the build summary).
	Name string `json:"name"`
	// Packages are Debian packages whose files the layer holds; their control data
	// goes to /var/lib/dpkg/status.d/<name> (as distroless images do), so image
	// scanners know what is installed. The .deb files come from the command line.
	Packages []string `json:"packages,omitempty"`
	// CABundle, when set, is the path of a PEM bundle generated from every
	// certificate under /usr/share/ca-certificates in the layer, in the order of
	// their paths (what update-ca-certificates writes on a Debian system).
	CABundle string `json:"caBundle,omitempty"`
	// Files are added after the packages' files.
	Files []File `json:"files,omitempty"`
}

// File is a file or directory the spec adds.
type File struct {
	// Path in the image (absolute).
	Path string `json:"path"`
	// Exactly one of Src (a file on the build host; a relative path is relative to
	// mkimage's --src-dir), Content (the file's text), Dir (a directory) and Symlink
	// (a symbolic link to this target, relative to the link's directory or absolute).
	Src     string `json:"src,omitempty"`
	Content string `json:"content,omitempty"`
	Dir     bool   `json:"dir,omitempty"`
	Symlink string `json:"symlink,omitempty"`
	// Mode in octal ("0755", "1777"). Default 0644 for files, 0755 for directories.
	Mode string `json:"mode,omitempty"`
	UID  int    `json:"uid,omitempty"`
	GID  int    `json:"gid,omitempty"`
}

// LoadSpec reads and validates a spec: unknown fields and every problem are reported.
func LoadSpec(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("image spec: %w", err)
	}
	var s Spec
	fieldErrs, err := strictyaml.Unmarshal(data, &s)
	if err != nil {
		return nil, fmt.Errorf("image spec %s: %w", file, err)
	}
	if err := errors.Join(append(fieldErrs, s.validate()...)...); err != nil {
		return nil, fmt.Errorf("image spec %s: %w", file, err)
	}
	return &s, nil
}

func (s *Spec) validate() []error {
	var errs []error
	if len(s.Config.Entrypoint) == 0 {
		errs = append(errs, errors.New("config.entrypoint: required"))
	}
	if len(s.Layers) == 0 {
		errs = append(errs, errors.New("layers: at least one is required"))
	}
	for _, g := range append(append([]string{}, s.Debian.PathExclude...), s.Debian.PathInclude...) {
		if !path.IsAbs(g) {
			errs = append(errs, fmt.Errorf("debian path filter %q: must be absolute", g))
		} else if _, err := globRegexp(g); err != nil {
			errs = append(errs, fmt.Errorf("debian path filter %q: %w", g, err))
		}
	}
	packages := map[string]bool{}
	for i, l := range s.Layers {
		at := fmt.Sprintf("layers[%d]", i)
		if l.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: required", at))
		}
		for _, p := range l.Packages {
			if packages[p] {
				errs = append(errs, fmt.Errorf("%s.packages: %s is listed twice", at, p))
			}
			packages[p] = true
		}
		if l.CABundle != "" && !path.IsAbs(l.CABundle) {
			errs = append(errs, fmt.Errorf("%s.caBundle %q: must be absolute", at, l.CABundle))
		}
		if len(l.Packages) == 0 && len(l.Files) == 0 {
			errs = append(errs, fmt.Errorf("%s: no packages and no files", at))
		}
		for j, f := range l.Files {
			at := fmt.Sprintf("%s.files[%d]", at, j)
			if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
				errs = append(errs, fmt.Errorf("%s.path %q: must be a clean absolute path below /", at, f.Path))
			}
			n := 0
			for _, set := range []bool{f.Src != "", f.Content != "", f.Dir, f.Symlink != ""} {
				if set {
					n++
				}
			}
			if n != 1 {
				errs = append(errs, fmt.Errorf("%s: exactly one of src, content, dir and symlink", at))
			}
			if _, err := f.mode(); err != nil {
				errs = append(errs, fmt.Errorf("%s.mode: %w", at, err))
			}
		}
	}
	for dep := range s.Debian.IgnoreDepends {
		if packages[dep] {
			errs = append(errs, fmt.Errorf("debian.ignoreDepends: %s is in the image", dep))
		}
	}
	return errs
}

// resolveSrc makes the relative src paths of files relative to dir.
func (s *Spec) resolveSrc(dir string) {
	for i := range s.Layers {
		for j, f := range s.Layers[i].Files {
			if f.Src != "" && !filepath.IsAbs(f.Src) {
				s.Layers[i].Files[j].Src = filepath.Join(dir, f.Src)
			}
		}
	}
}

// Packages returns every Debian package of the spec, bottom layer first.
func (s *Spec) Packages() []string {
	var out []string
	for _, l := range s.Layers {
		out = append(out, l.Packages...)
	}
	return out
}

// mode returns the file's mode bits (permissions, setuid, setgid, sticky).
func (f File) mode() (int64, error) {
	if f.Mode == "" {
		if f.Dir {
			return 0o755, nil
		}
		if f.Symlink != "" {
			return 0o777, nil
		}
		return 0o644, nil
	}
	m, err := strconv.ParseInt(f.Mode, 8, 64)
	if err != nil || m < 0 || m > 0o7777 {
		return 0, fmt.Errorf("%q is not an octal mode", f.Mode)
	}
	return m, nil
}

// pathFilter is dpkg's path-exclude/path-include.
type pathFilter struct{ exclude, include []*regexp.Regexp }

// newPathFilter compiles the filters of a validated spec.
func newPathFilter(d Debian) pathFilter {
	var f pathFilter
	for _, g := range d.PathExclude {
		r, _ := globRegexp(g)
		f.exclude = append(f.exclude, r)
	}
	for _, g := range d.PathInclude {
		r, _ := globRegexp(g)
		f.include = append(f.include, r)
	}
	return f
}

// excluded reports whether an absolute path is filtered out.
func (f pathFilter) excluded(p string) bool {
	out := false
	for _, r := range f.exclude {
		if r.MatchString(p) {
			out = true
			break
		}
	}
	if !out {
		return false
	}
	for _, r := range f.include {
		if r.MatchString(p) {
			return false
		}
	}
	return true
}

// globRegexp turns a dpkg filter glob (fnmatch without FNM_PATHNAME: * and ? also
// match /, [...] is a class) into an anchored regular expression.
func globRegexp(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(g); i++ {
		switch c := g[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			if j := strings.IndexByte(g[i+1:], ']'); j > 0 {
				class := g[i+1 : i+1+j]
				if class[0] == '!' {
					class = "^" + class[1:]
				}
				b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
				i += j + 1
				continue
			}
			b.WriteString(regexp.QuoteMeta("["))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	r, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("not a glob dpkg understands: %w", err)
	}
	return r, nil
}
