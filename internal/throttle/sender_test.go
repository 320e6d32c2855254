package throttle

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
)

// The debug line of a grant names its sender: on a unix socket the
// process that connected (here, this one), so a sender's slots can be
// told apart from others' for the same key.
func TestGrantLogNamesSender(t *testing.T) {
	var logs logbuf.Buffer
	s := NewServer(Options{Handler: &gate{at: time.Unix(1700000000, 5)},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "throttle"))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-served
	}()
	cl, err := Dial("unix", l.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Acquire("mx.example.org"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`msg="throttle: slot granted" key=mx.example.org at=%s sender="pid %d"`,
		time.Unix(1700000000, 5).Format(time.RFC3339Nano), os.Getpid())
	logs.WaitFor(t, want)
}
