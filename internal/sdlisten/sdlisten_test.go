package sdlisten

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const pid = 4242
	for _, tc := range []struct {
		name    string
		env     Env
		want    []string
		wantErr string
	}{
		{name: "none", env: Env{}},
		{name: "another process's", env: Env{PID: "1", FDs: "2"}},
		{name: "ours, unnamed", env: Env{PID: "4242", FDs: "2"}, want: []string{"unknown", "unknown"}},
		{name: "ours, named", env: Env{PID: "4242", FDs: "3", FDNames: "anvil:policy:policy"}, want: []string{"anvil", "policy", "policy"}},
		{name: "no pid", env: Env{FDs: "1", FDNames: "web"}, want: []string{"web"}},
		{name: "empty name", env: Env{PID: "4242", FDs: "2", FDNames: "a:"}, want: []string{"a", "unknown"}},
		{name: "zero", env: Env{PID: "4242", FDs: "0"}, want: []string{}},
		{name: "bad pid", env: Env{PID: "x", FDs: "1"}, wantErr: "LISTEN_PID"},
		{name: "bad count", env: Env{PID: "4242", FDs: "two"}, wantErr: "LISTEN_FDS"},
		{name: "negative", env: Env{PID: "4242", FDs: "-1"}, wantErr: "LISTEN_FDS"},
		{name: "too many", env: Env{PID: "4242", FDs: "100000"}, wantErr: "LISTEN_FDS"},
		{name: "names short", env: Env{PID: "4242", FDs: "2", FDNames: "one"}, wantErr: "LISTEN_FDNAMES has 1 names"},
		{name: "names long", env: Env{PID: "4242", FDs: "1", FDNames: "a:b"}, wantErr: "LISTEN_FDNAMES has 2 names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.env.parse(pid)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parse = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != strings.Join(tc.want, ",") || (got == nil) != (tc.want == nil) {
				t.Fatalf("parse = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add("4242", "2", "a:b")
	f.Add("", "1", "")
	f.Add("4242", "1024", "")
	f.Fuzz(func(t *testing.T, pid, fds, names string) {
		got, err := Env{PID: pid, FDs: fds, FDNames: names}.parse(4242)
		if err == nil && len(got) > maxFDs {
			t.Fatalf("%d descriptors accepted", len(got))
		}
	})
}

// The child side of TestTake: run with descriptors from 3 on, it takes
// them and prints what it claimed, and what was left.
func TestMain(m *testing.M) {
	if os.Getenv("SDLISTEN_CHILD") == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func child() int {
	e := FromEnviron()
	e.PID = fmt.Sprint(os.Getpid()) // exec.Cmd cannot know the child's pid in advance
	s, err := Take(e)
	if err != nil {
		fmt.Println("error:", err)
		return 0
	}
	if os.Getenv("LISTEN_FDS") != "" {
		fmt.Println("error: LISTEN_FDS left in the environment")
	}
	for _, spec := range strings.Fields(os.Getenv("SDLISTEN_CLAIM")) {
		network, addr, _ := strings.Cut(spec, "=")
		l, _, ok := s.Claim(network, addr)
		if !ok {
			fmt.Println("unclaimed", spec)
			continue
		}
		// Serve one connection, to show the listener works.
		go func() {
			if c, err := l.Accept(); err == nil {
				fmt.Fprintln(c, "hello from", network)
				c.Close()
			}
		}()
		fmt.Println("claimed", spec)
	}
	fmt.Println("left", strings.Join(s.Unclaimed(), ";"))
	bufio.NewReader(os.Stdin).ReadString('\n') // until the test is done
	return 0
}

// runChild starts the test binary as the child with files as
// descriptors 3, 4, ...
func runChild(t *testing.T, files []*os.File, names, claim string) (*bufio.Reader, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SDLISTEN_CHILD=1", fmt.Sprintf("LISTEN_FDS=%d", len(files)), "LISTEN_FDNAMES="+names, "SDLISTEN_CLAIM="+claim)
	cmd.ExtraFiles = files
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return bufio.NewReader(out), func() { stdin.Close(); _ = cmd.Wait() }
}

func line(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	s, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v (got %q)", err, s)
	}
	return strings.TrimSpace(s)
}

func TestTake(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "anvil")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	uf, _ := ul.(*net.UnixListener).File()
	tf, _ := tl.(*net.TCPListener).File()
	defer uf.Close()
	defer tf.Close()

	r, done := runChild(t, []*os.File{uf, tf}, "sluice.socket:sluice.socket", "unix="+sock+" tcp="+tl.Addr().String()+" tcp=127.0.0.1:1")
	defer done()
	for _, want := range []string{"claimed unix=" + sock, "claimed tcp=" + tl.Addr().String(), "unclaimed tcp=127.0.0.1:1", "left"} {
		if got := line(t, r); got != want {
			t.Fatalf("child said %q, want %q", got, want)
		}
	}
	for _, target := range [][2]string{{"unix", sock}, {"tcp", tl.Addr().String()}} {
		c, err := net.Dial(target[0], target[1])
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64)
		n, _ := c.Read(b)
		c.Close()
		// Either process may accept: the parent's copy is not served, so
		// only the child answers.
		if got := string(b[:n]); got != "hello from "+target[0]+"\n" {
			t.Errorf("%s: got %q from the claimed socket", target[0], got)
		}
	}
}

func TestTakeUnclaimed(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	tf, _ := tl.(*net.TCPListener).File()
	defer tf.Close()
	r, done := runChild(t, []*os.File{tf}, "web", "")
	defer done()
	if got, want := line(t, r), "left web ("+tl.Addr().String()+")"; got != want {
		t.Fatalf("child said %q, want %q", got, want)
	}
}

func TestTakeRefusesNonListening(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "file")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	uf, _ := pc.(*net.UDPConn).File()
	defer uf.Close()
	for _, tc := range []struct {
		name string
		file *os.File
		want string
	}{
		{"file", f, "not a socket"},
		{"datagram", uf, "not a listening stream socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, done := runChild(t, []*os.File{tc.file}, tc.name, "")
			defer done()
			if got := line(t, r); !strings.HasPrefix(got, "error: ") || !strings.Contains(got, tc.want) {
				t.Fatalf("child said %q, want an error with %q", got, tc.want)
			}
		})
	}
}
