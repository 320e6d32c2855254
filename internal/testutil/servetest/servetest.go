// Package servetest checks what every server on netserve promises when
// one connection's handler panics: that connection is closed and the
// others stay.
package servetest

import (
	"errors"
	"io"
	"testing"
	"time"
)

// ClosedAlone fails t unless the victim's connection (read through
// victim) is at EOF and conns, the server's count of open connections,
// falls to want, the bystanders, within 30 s (a bound against a hang,
// not a timing requirement).
func ClosedAlone(t testing.TB, victim io.ByteReader, conns func() int, want int) {
	t.Helper()
	if b, err := victim.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the panic the connection is still open: read %q %v", b, err)
	}
	for deadline := time.Now().Add(30 * time.Second); conns() != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want the bystanders' %d", conns(), want)
		}
	}
}
