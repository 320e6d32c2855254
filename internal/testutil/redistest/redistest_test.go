package redistest

import (
	"errors"
	"net"
	"testing"

	"sluice/internal/testutil/peer"
)

// A server that cannot start (its port is taken) is an error, reported
// with its log; the process is reaped either way.
func TestStartTakenPort(t *testing.T) {
	if _, err := Binary(); errors.Is(err, ErrNoRedis) {
		peer.Missing(t, "redis-server", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := Start(t.TempDir(), l.Addr().(*net.TCPAddr).Port)
	if err == nil {
		s.Kill()
		t.Fatal("started a redis-server on a port already taken")
	}
	t.Log(err)
}
