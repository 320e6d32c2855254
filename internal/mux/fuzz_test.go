package mux_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"sluice/internal/mux"
)

func TestReadRequest(t *testing.T) {
	for _, tc := range []struct {
		in        string
		halfClose bool
		want      string
	}{
		{"free\n", false, "free"},
		{"status\r\n", false, "status"},
		{"status\r\r\n", false, "status\r"},
		{"free\nmsgs\n", false, "free"},
		{"free", true, "fre"},
		{"", true, ""},
		{"x\x00y\n", false, "x"},
		{strings.Repeat("a", 5000) + "\n", false, strings.Repeat("a", 4095)},
	} {
		got, ok := readVia(t, tc.in, tc.halfClose)
		if !ok || got != tc.want {
			t.Errorf("%q: got %q (%v), want %q", trunc(tc.in), trunc(got), ok, trunc(tc.want))
		}
	}
	// Nothing in time: no request at all.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok := mux.ReadRequest(b, 50*time.Millisecond); ok {
		t.Fatal("a silent client produced a request")
	}
}

// readVia has ReadRequest read in from a client that half-closes after
// it or, when not halfClose, keeps its end open until ReadRequest has
// returned: a request without a newline then ends only by the read
// timeout (10 ms: nothing more can come), one with a newline by its
// newline, never by the client's close.
func readVia(t testing.TB, in string, halfClose bool) (string, bool) {
	a, b := net.Pipe()
	defer b.Close()
	read := make(chan struct{})
	defer close(read)
	go func() {
		_, _ = a.Write([]byte(in))
		if !halfClose {
			<-read
		}
		a.Close()
	}()
	timeout := 5 * time.Second
	if !halfClose && !strings.Contains(in, "\n") {
		timeout = 10 * time.Millisecond
	}
	return mux.ReadRequest(b, timeout)
}

func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{"free\n", "status\r\n", "load1 10\n", "workerinfo 3\n", "x\x00y\n", "scan Q1 /tmp\n", strings.Repeat("z", 4100)} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, in string, halfClose bool) {
		got, ok := readVia(t, in, halfClose)
		if !halfClose && !strings.Contains(in, "\n") {
			if ok {
				t.Fatalf("%q without a newline, the client still there: request %q before the timeout", trunc(in), trunc(got))
			}
			return
		}
		if !ok {
			t.Fatalf("%q (half-closed %v): no request", trunc(in), halfClose)
		}
		if len(got) > 4095 || strings.ContainsRune(got, 0) {
			t.Fatalf("request of %d bytes: %q", len(got), trunc(got))
		}
		if strings.Contains(got, "\n") {
			t.Fatalf("newline in request %q", trunc(got))
		}
	})
}
