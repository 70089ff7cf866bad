package lock

import "errors"

var (
	// ErrNotObtained is returned by Obtain and ObtainReentrant when Redis
	// answered that the lock is held by someone else (after waiting, with
	// WaitFor; joined with ctx.Err() when the caller's context ended while
	// it waited). It never stands for a Redis failure or a deadline that
	// cut a Redis call short: those are other errors.
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrNotHeld is returned by Release, Refresh, TTL and FenceContext when
	// the lock is no longer held by this handle (for a reentrant lock: this
	// hold): it expired, was taken over, or was already released (by this
	// very Release when its reply was lost and the client sent it again:
	// see the package doc). Nothing is changed in Redis in that case, and
	// Lost is closed.
	ErrNotHeld = errors.New("lock: not held")

	// ErrClosed is returned when the Client was closed.
	ErrClosed = errors.New("lock: client closed")
)
