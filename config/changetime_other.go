//go:build !linux

package config

import (
	"io/fs"
	"time"
)

// changeTime is when a file last changed, by its modification time (the
// inode change time is read on Linux only).
func changeTime(fi fs.FileInfo) time.Time { return fi.ModTime() }
