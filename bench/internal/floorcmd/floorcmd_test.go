package floorcmd

import (
	"bufio"
	"io"
	"testing"
)

// TestParse: the options the floors use, their defaults, and the command
// lines that are refused.
func TestParse(t *testing.T) {
	a, err := Parse("floor", []string{"mux", "-D", "-s", "x.sock", "-f", "/bin/cat", "-x", "8", "-U", "defang"})
	if err != nil || a != (Args{Socket: "x.sock", Program: "/bin/cat", Workers: 8, Backlog: 5}) {
		t.Fatalf("Parse: %+v %v", a, err)
	}
	if a, err := Parse("floor", []string{"-s", "x", "-f", "y", "-x", "40", "-I", "3"}); err != nil || a.Workers != 40 || a.Backlog != 3 {
		t.Fatalf("Parse with -x 40 -I 3: %+v %v", a, err)
	}
	if a, _ := Parse("floor", []string{"-s", "x", "-f", "y", "-x", "40"}); a.Backlog != 10 {
		t.Fatalf("default backlog for -x 40: %d, want 10", a.Backlog)
	}
	for _, args := range [][]string{
		{"mux"},
		{"mux", "-s", "x.sock"},
		{"mux", "-s", "x.sock", "-f", "/bin/cat", "-x", "0"},
		{"mux", "-s", "x.sock", "-f", "/bin/cat", "-I", "many"},
	} {
		if _, err := Parse("floor", args); err == nil {
			t.Errorf("Parse(%q): no error", args)
		}
	}
}

// TestStartWorker: a worker gets what is written to its stdin and its
// stdout comes back; a program that cannot start is an error.
func TestStartWorker(t *testing.T) {
	in, out, err := StartWorker("/bin/cat")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.WriteString(in, "hello\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "hello\n" {
		t.Fatalf("read %q %v", line, err)
	}
	in.Close() // cat exits at EOF
	if _, _, err := StartWorker("/nonexistent/worker"); err == nil {
		t.Fatal("StartWorker of a missing program: no error")
	}
}
