package lock

import "errors"

var (
	// ErrNotObtained is returned by Obtain and ObtainReentrant when the lock
	// is held by someone else (after waiting, with WaitFor).
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrNotHeld is returned by Release, Refresh, TTL and FenceContext when
	// the lock is no longer held by this handle: it expired, was taken over,
	// or was already released. Nothing is changed in Redis in that case.
	ErrNotHeld = errors.New("lock: not held")

	// ErrClosed is returned when the Client was closed.
	ErrClosed = errors.New("lock: client closed")
)
