package watches

import "context"

// ListsAtOnce is how many informers of a component list at once. An informer's first
// list streams every object of its kind, each up to about 1.5 MiB, through a buffer
// the API server may fill ahead of the reader (HTTP/2's window of 4 MiB); a watcher
// of eleven kinds started after a flood of each held them all at once, and peaked at
// 192 MiB of its 256.
const ListsAtOnce = 2

// Turns bounds how many informers list at once, across every kind a component opens
// through the door. A nil *Turns bounds nothing.
type Turns struct{ free chan struct{} }

// NewTurns lets n informers list at once.
func NewTurns(n int) *Turns {
	return &Turns{free: make(chan struct{}, n)}
}

// take waits for a turn and returns what gives it back; ok is false when ctx ended
// first.
func (t *Turns) take(ctx context.Context) (give func(), ok bool) {
	if t == nil {
		return func() {}, true
	}
	select {
	case t.free <- struct{}{}:
		return func() { <-t.free }, true
	case <-ctx.Done():
		return nil, false
	}
}
