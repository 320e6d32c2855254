package netserve

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sluice/internal/testutil/logbuf"
	"strings"
	"testing"
)

// TestRefuse: past MaxConns, Refuse writes its reply before the
// connection is closed; a panic in it is logged and closes that
// connection only.
func TestRefuse(t *testing.T) {
	var logs logbuf.Buffer
	s := New(Options{
		Name: "one", Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		ConnLimits: ConnLimits{MaxConns: 1, IdleTimeout: -1, RequestTimeout: -1},
		Refuse: func(c net.Conn) {
			if strings.Contains(logs.String(), "refused_total=2") {
				panic("refuse bug")
			}
			io.WriteString(c, "busy\n")
		},
	}, echoLines)
	dial := serveTCP(t, s)
	first, fr := dial()
	io.WriteString(first, "hi\n")
	if got, err := fr.ReadString('\n'); err != nil || got != "hi\n" {
		t.Fatalf("first: %q %v", got, err)
	}
	_, sr := dial()
	if got, err := sr.ReadString('\n'); err != nil || got != "busy\n" {
		t.Fatalf("second: %q %v, want busy", got, err)
	}
	if _, err := sr.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("second after busy: %v", err)
	}
	_, tr := dial() // the log says refused_total=2: Refuse panics
	if got, err := tr.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("third: %q %v, want EOF", got, err)
	}
	logs.WaitFor(t, "one: panic refusing a connection", "refuse bug")
}
