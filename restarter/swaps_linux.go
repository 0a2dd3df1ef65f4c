package restarter

import (
	"context"
	"fmt"
	"os"
	"syscall"
)

// swapEvents are the changes of a downward API volume's directory that a token's
// write makes: the kubelet's AtomicWriter creates a new timestamped directory and
// renames a new ..data symlink over the old one.
const swapEvents = syscall.IN_CREATE | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF

// watchDir returns a channel that receives after each change of dir, at once rather
// than at the next poll, until ctx is done. It costs no CPU between changes, and one
// inotify instance of the user's (fs.inotify.max_user_instances): where none is left,
// it returns the error, and a nil channel, which never receives.
func watchDir(ctx context.Context, dir string) (<-chan struct{}, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, swapEvents); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("inotify watch of %s: %w", dir, err)
	}
	// Non-blocking, the file is read through the runtime's poller: closing it ends
	// a read under way.
	f := os.NewFile(uintptr(fd), "inotify")
	swaps := make(chan struct{}, 1)
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil {
				return // closed, or the watch is gone: the poll goes on
			}
			select {
			case swaps <- struct{}{}:
			default: // a read is due already
			}
		}
	}()
	return swaps, nil
}
