package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// writeRootfs writes the layers' files into dir (which must be empty or absent), as
// packaging/Dockerfile's build stage does before `COPY --from=build /rootfs/ /`: the same
// content as the OCI archive. Owners are set when running as root.
func writeRootfs(dir string, layers []*layerTree, mtime time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if ents, err := os.ReadDir(dir); err != nil {
		return err
	} else if len(ents) > 0 {
		return fmt.Errorf("%s is not empty", dir)
	}
	root := os.Geteuid() == 0
	var dirs []*entry
	for _, l := range layers {
		for _, e := range l.sorted() {
			p := filepath.Join(dir, filepath.FromSlash(e.path))
			var err error
			switch e.typeflag {
			case tar.TypeDir:
				err = os.Mkdir(p, 0o700)
				if errors.Is(err, fs.ErrExist) {
					err = nil
				}
				dirs = append(dirs, e)
			case tar.TypeSymlink:
				err = os.Symlink(e.link, p)
			case tar.TypeReg:
				err = writeFile(p, e)
			}
			if err == nil && root {
				err = os.Lchown(p, e.uid, e.gid)
			}
			if err == nil && e.typeflag == tar.TypeReg {
				// after chown, which clears setuid bits
				err = os.Chmod(p, fileMode(e.mode))
			}
			if err == nil && e.typeflag == tar.TypeReg {
				err = os.Chtimes(p, mtime, mtime)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", e.path, err)
			}
		}
	}
	// Directory modes and times last, so read-only directories could be filled.
	for i := len(dirs) - 1; i >= 0; i-- {
		p := filepath.Join(dir, filepath.FromSlash(dirs[i].path))
		if err := os.Chmod(p, fileMode(dirs[i].mode)); err != nil {
			return err
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(p string, e *entry) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	r, err := e.open()
	if err != nil {
		f.Close()
		return err
	}
	defer r.Close()
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fileMode converts tar mode bits to an fs.FileMode.
func fileMode(m int64) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}
