package config

import (
	"io/fs"
	"syscall"
	"time"
)

// changeTime is when a file last changed: the later of its modification
// time and its inode change time. A writer can set the modification time
// back (touch -d, cp -p); the change time moves on every write, rename and
// metadata change and cannot be set.
func changeTime(fi fs.FileInfo) time.Time {
	t := fi.ModTime()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if c := time.Unix(st.Ctim.Unix()); c.After(t) {
			t = c
		}
	}
	return t
}
