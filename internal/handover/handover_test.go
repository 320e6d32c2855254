package handover

import (
	"bufio"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// handPair is both ends of a hand-over conversation.
func handPair(t *testing.T) (*conn, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := newConn(os.NewFile(uintptr(fds[0]), "ours"))
	if err != nil {
		t.Fatal(err)
	}
	peer := os.NewFile(uintptr(fds[1]), "theirs")
	t.Cleanup(func() { h.close(); peer.Close() })
	return h, peer
}

func TestConnExpect(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		eof            bool
	}{
		{"the line", "take\n", "", false},
		{"another line", "serving\n", `got "serving", want "take"`, false},
		{"no newline, then gone", "take", "EOF", true},
		{"gone", "", "EOF", true},
		{"a line too long", strings.Repeat("x", 100) + "\n", "buffer full", false},
		{"a NUL", "ta\x00ke\n", `got "ta\x00ke"`, false},
	} {
		h, peer := handPair(t)
		if _, err := io.WriteString(peer, tc.in); err != nil {
			t.Fatal(err)
		}
		if tc.eof {
			peer.Close()
		}
		err := h.expect(lineTake, 5*time.Second)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		case tc.eof && !errors.Is(err, io.EOF):
			t.Errorf("%s: %v is not EOF", tc.name, err)
		}
	}
	h, _ := handPair(t)
	if err := h.expect(lineGo, 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("a silent peer: %v", err)
	}
	h, peer := handPair(t)
	if err := h.send(lineServing); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(peer).ReadString('\n'); err != nil || line != "serving\n" {
		t.Errorf("send: %q %v", line, err)
	}
}

func TestEnv(t *testing.T) {
	in := []string{"PATH=/usr/bin", "LISTEN_PID=1", "LISTEN_FDS=9", "LISTEN_FDNAMES=x", "SLUICE_UPGRADE_FD=12",
		"SLUICE_LISTEN_FDS=3s", "NOTIFY_SOCKET=/run/systemd/notify", "LISTEN_FDS_X=kept"}
	got := env(in, 2, []string{"anvil", "policy"})
	want := []string{"PATH=/usr/bin", "NOTIFY_SOCKET=/run/systemd/notify", "LISTEN_FDS_X=kept",
		"LISTEN_FDS=2", "LISTEN_FDNAMES=anvil:policy", "SLUICE_UPGRADE_FD=5"}
	if !slices.Equal(got, want) {
		t.Errorf("env:\n got %q\nwant %q", got, want)
	}
}

func FuzzConnExpect(f *testing.F) {
	f.Add([]byte("take\n"))
	f.Add([]byte("serving\nbye\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		h, err := newConn(os.NewFile(uintptr(fds[0]), "ours"))
		if err != nil {
			t.Fatal(err)
		}
		defer h.close()
		peer := os.NewFile(uintptr(fds[1]), "theirs")
		go func() { _, _ = peer.Write(b); peer.Close() }()
		err = h.expect(lineTake, 5*time.Second)
		if (err == nil) != strings.HasPrefix(string(b), lineTake+"\n") {
			t.Fatalf("%q: %v", b, err)
		}
	})
}
