package socketmap

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/netserve"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if workerDir != "" {
		os.RemoveAll(workerDir)
	}
	if code == 0 {
		// The pool's SIGCHLD watcher stays registered with os/signal.
		if err := goleak.Find(goleak.IgnoreTopFunction("os/signal.signal_recv")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// echo answers "OK <map>|<key>", "NOTFOUND " for map nf, and fails for
// map closed.
var echo = HandlerFunc(func(_ context.Context, name, key string) (string, error) {
	switch name {
	case "nf":
		return "NOTFOUND ", nil
	case "closed":
		return "", errors.New("closed")
	}
	return "OK " + name + "|" + key, nil
})

// rw is a one-shot connection: reads from in, writes to out.
type rw struct {
	io.Reader
	out bytes.Buffer
}

func (c *rw) Write(b []byte) (int, error) { return c.out.Write(b) }

func TestParseRequest(t *testing.T) {
	for in, want := range map[string][3]string{
		"rev hello world": {"rev", "hello world", "true"},
		"rev ":            {"rev", "", "true"},
		" key":            {"", "key", "true"},
		" ":               {"", "", "true"},
		"nospace":         {"nospace", "", "false"},
		"":                {"", "", "false"},
		"a\x00b c":        {"a\x00b", "c", "true"},
	} {
		n, k, ok := ParseRequest([]byte(in))
		if got := [3]string{n, k, fmt.Sprint(ok)}; got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// Whole conversations: replies in order, and where the server hangs up.
func TestServeConn(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"15:rev hello world,", "18:OK rev|hello world,"},
		{"15:rev hello world,10:nf somekey,", "18:OK rev|hello world,9:NOTFOUND ,"},
		{"7:nospace,", "27:PERM Invalid request format,"},
		{"0:,", "27:PERM Invalid request format,"},
		{"1: ,", "4:OK |,"},
		{"3:abcX5:a b c,", "40:PERM Netstring missing terminating comma,8:OK a|b c,"},
		{"3:a bX", "40:PERM Netstring missing terminating comma,"},
		// A bad length closes the connection without a reply, even after
		// good requests.
		{"3:a b,x:abc,3:a b,", "6:OK a|b,"},
		{":3:a b,", ""},
		{"-1:a,", ""},
		{"65537:", ""},
		{"0000000000000003:a b,", "6:OK a|b,"},
		{"00000000000000003:a b,", "40:PERM Netstring missing terminating comma,"},
		{"000000000000003:a b,", "6:OK a|b,"},
		// EOF inside a request: no reply.
		{"5:a b", ""},
		{"12", ""},
		// The handler's error closes the connection.
		{"8:closed x,3:a b,", ""},
	} {
		c := &rw{Reader: strings.NewReader(tc.in)}
		ServeConn(context.Background(), c, echo, time.Second)
		if got := c.out.String(); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
		}
	}
	// The longest payload the codec accepts is served.
	key := strings.Repeat("k", MaxLen-2)
	c := &rw{Reader: strings.NewReader(string(AppendNetstring(nil, "m "+key)))}
	ServeConn(context.Background(), c, echo, time.Second)
	if want := string(AppendNetstring(nil, "OK m|"+key)); c.out.String() != want {
		t.Errorf("longest request: %d bytes of reply", c.out.Len())
	}
}

func readReply(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	p, err := ReadNetstring(r)
	if err != nil {
		t.Fatalf("reading a reply: %v", err)
	}
	return string(p)
}

// A real listener: persistent connections served concurrently, one
// request at a time each; Close ends lookups in flight and idle clients.
func TestServer(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	inFlight := 0
	h := HandlerFunc(func(ctx context.Context, name, key string) (string, error) {
		mu.Lock()
		inFlight++
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		switch name {
		case "block":
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		case "hold":
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "OK " + key, nil
	})
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "map.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(h, Options{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	a, ar := dial()
	defer a.Close()
	for i := range 3 { // persistent
		req := fmt.Sprintf("m k%d", i)
		if _, err := a.Write(AppendNetstring(nil, req)); err != nil {
			t.Fatal(err)
		}
		if got := readReply(t, ar); got != fmt.Sprintf("OK k%d", i) {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	// a blocks; b is still served.
	if _, err := a.Write([]byte("7:block x,")); err != nil {
		t.Fatal(err)
	}
	b, br := dial()
	defer b.Close()
	if _, err := b.Write([]byte("3:m y,")); err != nil {
		t.Fatal(err)
	}
	if got := readReply(t, br); got != "OK y" {
		t.Fatalf("b: %q", got)
	}
	close(release)
	if got := readReply(t, ar); got != "OK x" {
		t.Fatalf("a after release: %q", got)
	}
	// A lookup in flight at Close is abandoned; the clients see EOF.
	c, cr := dial()
	defer c.Close()
	if _, err := c.Write([]byte("6:hold z,")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := inFlight
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lookup never started")
		}
	}
	s.Close()
	if err := <-done; !errors.Is(err, netserve.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	for _, r := range []*bufio.Reader{ar, br, cr} {
		if _, err := r.ReadByte(); err != io.EOF {
			t.Errorf("after Close: %v", err)
		}
	}
	if err := s.Serve(ln); !errors.Is(err, netserve.ErrServerClosed) {
		t.Errorf("Serve after Close: %v", err)
	}
}

// FuzzServeConn runs whole conversations: the server answers exactly the
// requests the codec reads (in order, a bad length ending the stream),
// each with a valid netstring of what ParseRequest and the handler make
// of it.
func FuzzServeConn(f *testing.F) {
	for _, s := range []string{"15:rev hello world,10:nf somekey,", "7:nospace,", "3:abcX3:a b,", "1: ,", "x:abc,", "0:,", "5:a b", "3:a b,8:closed x,3:a b,"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &rw{Reader: bytes.NewReader(in)}
		ServeConn(context.Background(), c, echo, time.Second)
		var want []byte
		r := bufio.NewReader(bytes.NewReader(in))
		for {
			p, err := ReadNetstring(r)
			if errors.Is(err, ErrNoComma) {
				want = AppendNetstring(want, ReplyNoComma)
				continue
			}
			if err != nil {
				break
			}
			name, key, ok := ParseRequest(p)
			if !ok {
				want = AppendNetstring(want, ReplyBadFormat)
				continue
			}
			if name+" "+key != string(p) {
				t.Fatalf("ParseRequest(%q) = %q, %q", p, name, key)
			}
			reply, err := echo(context.Background(), name, key)
			if err != nil {
				break
			}
			want = AppendNetstring(want, reply)
		}
		if !bytes.Equal(c.out.Bytes(), want) {
			t.Fatalf("%q: replies %q, want %q", in, c.out.Bytes(), want)
		}
		// The replies are well-formed netstrings.
		out := bufio.NewReader(bytes.NewReader(c.out.Bytes()))
		for {
			if _, err := ReadNetstring(out); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("bad reply stream %q: %v", c.out.Bytes(), err)
			}
		}
	})
}
