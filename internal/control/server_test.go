package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/netserve"
	"sluice/internal/testutil/logbuf"
)

type echo struct{}

func (echo) Handle(_ context.Context, p Peer, req Request) (Reply, error) {
	switch req.Command {
	case "fail":
		return Reply{}, errors.New("no such thing")
	case "change":
		return Reply{Text: "changed\n", Changed: "reset " + req.Args["key"]}, nil
	}
	return Reply{Result: map[string]int{"uid": p.UID}, Text: "hello\n"}, nil
}

func startServer(t *testing.T, o Options) (string, *logbuf.Buffer) {
	t.Helper()
	var logs logbuf.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	o.Handler = echo{}
	path := filepath.Join(t.TempDir(), "control")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(o)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, netserve.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		s.Wait()
	})
	return path, &logs
}

// TestServerLogsPeer: each command is answered, and leaves one log line
// naming the peer's uid and pid, with what changed for a change.
func TestServerLogsPeer(t *testing.T) {
	path, logs := startServer(t, Options{})
	ctx := context.Background()
	resp, err := Do(ctx, path, Request{Command: "hello"})
	if err != nil || !resp.OK || resp.Text != "hello\n" || string(resp.Result) != fmt.Sprintf(`{"uid":%d}`, os.Geteuid()) {
		t.Fatalf("hello: %+v, %v", resp, err)
	}
	resp, err = Do(ctx, path, Request{Command: "change", Args: map[string]string{"key": "sender=a@b.example"}})
	if err != nil || !resp.OK {
		t.Fatalf("change: %+v, %v", resp, err)
	}
	resp, _ = Do(ctx, path, Request{Command: "fail"})
	if resp.OK || resp.Error != "no such thing" {
		t.Fatalf("fail: %+v", resp)
	}
	who := fmt.Sprintf("uid=%d pid=%d", os.Geteuid(), os.Getpid())
	for _, want := range []string{"control: hello", "control: change", "control: command failed"} {
		lines := logs.Lines(want)
		if len(lines) != 1 || !strings.Contains(lines[0], who) {
			t.Errorf("log lines with %q: %q; want one naming %s", want, lines, who)
		}
	}
	if l := logs.Lines("control: change"); len(l) == 1 && !strings.Contains(l[0], `changed="reset sender=a@b.example"`) {
		t.Errorf("the change's line does not say what changed: %s", l[0])
	}
	// What changed, as a peer typed it, cannot forge a line or carry an
	// escape sequence.
	if resp, err := Do(ctx, path, Request{Command: "change", Args: map[string]string{"key": "x\rtime=0 level=ERROR msg=forged\x1b[2J"}}); err != nil || !resp.OK {
		t.Fatalf("change: %+v, %v", resp, err)
	}
	if l := logs.Lines("msg=forged"); len(l) != 1 || !strings.Contains(l[0], `changed="reset x?time=0 level=ERROR msg=forged?[2J"`) {
		t.Errorf("the change's line with control bytes: %q", l)
	}
}

// TestServerRefusesPeer: a peer Allow refuses is told so and logged, and
// its command is not run.
func TestServerRefusesPeer(t *testing.T) {
	path, logs := startServer(t, Options{Allow: func(Peer) bool { return false }})
	resp, err := Do(context.Background(), path, Request{Command: "change"})
	if err != nil || resp.OK || !strings.Contains(resp.Error, "not allowed") {
		t.Fatalf("refused peer: %+v, %v", resp, err)
	}
	if len(logs.Lines("refused a peer")) != 1 || len(logs.Lines("control: change")) != 0 {
		t.Fatalf("log: %s", logs.String())
	}
}

// TestServerMalformed: a malformed or over-long request is answered with
// an error and the connection closed; the next connection is served.
func TestServerMalformed(t *testing.T) {
	path, logs := startServer(t, Options{MaxLine: 256, ConnLimits: netserve.ConnLimits{IdleTimeout: time.Minute}})
	for _, in := range []string{"not json\n", `{"command":"x","args":{"k":"` + strings.Repeat("y", 300) + "\"}}\n"} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, in)
		r := bufio.NewReader(c)
		resp, err := ReadResponse(r)
		if err != nil || resp.OK || !strings.Contains(resp.Error, "malformed") {
			t.Fatalf("%.20q: %+v, %v", in, resp, err)
		}
		if _, err := r.ReadByte(); err == nil {
			t.Fatal("the connection stayed open after a malformed request")
		}
		c.Close()
	}
	if n := len(logs.Lines("malformed request")); n != 2 {
		t.Fatalf("%d malformed-request lines; want 2", n)
	}
	if resp, err := Do(context.Background(), path, Request{Command: "hello"}); err != nil || !resp.OK {
		t.Fatalf("after the malformed ones: %+v, %v", resp, err)
	}
}
