package uevent

import (
	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/ueventtest"
)

// fakeDialer is a ueventtest.Dialer as a Dialer (its dial).
type fakeDialer struct{ *ueventtest.Dialer }

func newFakeDialer(conns ...*ueventtest.Conn) *fakeDialer {
	return &fakeDialer{ueventtest.NewDialer(conns...)}
}

func (f *fakeDialer) dial(bool) (Conn, error) {
	c, err := f.Next()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// waitFor is eventually.True, by the name this package's tests know it.
var waitFor = eventually.True
