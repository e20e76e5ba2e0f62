package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// multiarch are Debian's multiarch directory names by architecture.
var multiarch = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// libDirs returns the dynamic loader's default search path on Debian for arch
// (ld.so.conf and its built-in directories).
func libDirs(arch string) []string {
	m := multiarch[arch]
	return []string{"/lib/" + m, "/usr/lib/" + m, "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"}
}

// checkELF verifies that every dynamically linked program and library in the image
// finds its loader (PT_INTERP) and every library it needs (DT_NEEDED, looked up in
// its RUNPATH/RPATH and the default directories) inside the image, so a package
// whose dependency went missing fails the build rather than the first BMC call.
func checkELF(img *image, arch string) error {
	var problems []string
	for _, e := range img.entries {
		if e.typeflag != tar.TypeReg || e.size < 4 {
			continue
		}
		f, err := openELF(e)
		if err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
		if f == nil {
			continue
		}
		problems = append(problems, elfProblems(img, e.path, f, libDirs(arch))...)
		f.Close()
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("missing shared libraries:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// openELF parses e as ELF, or returns nil when it is not an ELF file.
func openELF(e *entry) (*elf.File, error) {
	if e.src == "" {
		if !bytes.HasPrefix(e.data, []byte(elf.ELFMAG)) {
			return nil, nil
		}
		return elf.NewFile(bytes.NewReader(e.data))
	}
	r, err := e.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	magic := make([]byte, len(elf.ELFMAG))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != elf.ELFMAG {
		return nil, nil
	}
	return elf.Open(e.src)
}

func elfProblems(img *image, p string, f *elf.File, defaultDirs []string) []string {
	var out []string
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(prog.Open())
		if err != nil {
			return []string{fmt.Sprintf("%s: reading PT_INTERP: %v", p, err)}
		}
		interp := strings.TrimRight(string(b), "\x00")
		if e := img.resolve(interp); e == nil || e.typeflag != tar.TypeReg {
			out = append(out, fmt.Sprintf("%s: loader %s is not in the image", p, interp))
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		if errors.Is(err, elf.ErrNoSymbols) {
			return out
		}
		return append(out, fmt.Sprintf("%s: reading DT_NEEDED: %v", p, err))
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", path.Dir(p)))
			}
		}
	}
	dirs = append(dirs, defaultDirs...)
	for _, lib := range needed {
		found := false
		for _, d := range dirs {
			if e := img.resolve(path.Join(d, lib)); e != nil && e.typeflag == tar.TypeReg {
				found = true
				break
			}
		}
		if !found {
			out = append(out, fmt.Sprintf("%s needs %s, which is not in the image", p, lib))
		}
	}
	return out
}
