package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
)

// TestDebianPackage builds the package with scripts/deb.sh and installs
// it with dpkg -i on a clean system: a throwaway root, the host's /
// under an overlay whose writes land in the test's directory, in mount,
// network and PID namespaces of its own (unshare), with every trace of
// sluice removed first (the installed-host set-up's binary, /etc/sluice,
// /var/lib/sluice, the user sluice). There testdata/debinstall.sh
// starts the daemon as the packaged unit has it (ExecStartPre=, then
// ExecStart= as User=sluice with no capability, given the sockets of
// the packaged socket units by systemd-socket-activate, as systemd
// would), runs `sluice status`, reloads it as ExecReload= has it (the
// check, then the signal) and runs `man sluice`, removes the package
// while the daemon runs (the prerm stops it; /run/sluice goes) and
// purges it (the user goes, and no file owned by its uid is left in
// /etc, /run, /tmp or /var). A sluice package installed on the host is
// purged in the overlay first, so the test runs the same with or without
// one. The host's dpkg database, users and files are never touched; the
// overlay costs nothing to make, where a debootstrap'd root costs
// minutes.
func TestDebianPackage(t *testing.T) {
	peer.Root(t, "dpkg -i into an overlay of / needs root (mount, chroot)")
	for _, b := range [][2]string{{"dpkg", "dpkg-deb"}, {"util-linux", "unshare"}, {"util-linux", "setpriv"},
		{"systemd", "systemd-socket-activate"}, {"man-db", "man"}, {"adduser", "adduser"}, {"iproute2", "ip"}} {
		peer.Binary(t, b[0], b[1])
	}
	t.Parallel()
	bin, _ := muxBinaries(t)
	dir := t.TempDir()
	deb := filepath.Join(dir, "out")
	cmd := exec.Command(filepath.Join(recipe.Root(), "scripts", "deb.sh"), deb)
	cmd.Env = append(os.Environ(), "SLUICE_BINARY="+bin, "VERSION=0~test", "DEB_COMPRESS=none")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/deb.sh: %v\n%s", err, stderrOf(err))
	}
	pkg := strings.TrimSpace(string(out))
	if filepath.Base(pkg) != "sluice_0~test_"+debArch(t)+".deb" {
		t.Fatalf("scripts/deb.sh printed %q", pkg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, "unshare", "--mount", "--net", "--pid", "--fork", "--propagation", "private",
		filepath.Join(recipe.Root(), "internal", "cli", "testdata", "debinstall.sh"), filepath.Join(dir, "root"), pkg)
	// As root's shell on that system: nothing of the test's environment
	// (its runtime and state directories) reaches sluice there.
	run.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	var log bytes.Buffer
	run.Stdout, run.Stderr = &log, &log
	err = run.Run()
	text := log.String()
	if err != nil || !strings.Contains(text, "== done") {
		t.Fatalf("the install on a clean system failed: %v\n%s", err, text)
	}
	for _, want := range []string{
		"Setting up sluice (0~test)",
		"/usr/bin/sluice\n",
		"uid=", // the user sluice, made by the postinst
		"/etc/sluice/sluice.toml root:sluice 640",
		"/var/lib/sluice sluice:sluice 750",
		"sluice 0~test install ok installed",
		"doors    anvil     unix:/var/spool/postfix/private/anvil",
		"         web       unix:web, inet:127.0.0.1:9465",
		"  everyone  0/200",
		"reloaded by ExecReload",
		"SLUICE(8)",
		"System Administration",
		"SLUICE.TOML(5)",
		"Removing sluice (0~test)",
		"Purging configuration files for sluice (0~test)",
		"\nno file of uid ",
		`msg="sluice started"`,
		"from_systemd=true",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the install's log lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

func debArch(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// TestManPagesNameEveryCommand: sluice(8) has every command of `sluice
// help` and every flag of the commands whose flags it lists, and
// sluice.toml(5) every top-level section of docs/config.md, so the pages
// the package installs do not fall behind the code.
func TestManPagesNameEveryCommand(t *testing.T) {
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(recipe.Root(), p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	page := read("packaging/man/sluice.8")
	for _, c := range commands() {
		if !strings.Contains(page, "\n.B "+c.name+"\n") {
			t.Errorf("sluice.8 has no .B %s entry under COMMANDS", c.name)
		}
		if c.name == "mux" || c.name == "ctl" { // their options are the reference's: -h lists them
			continue
		}
		var help bytes.Buffer
		Main(context.Background(), []string{c.name, "-h"}, &help, &help)
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(help.String(), -1) {
			if flag := `\-` + strings.ReplaceAll(m[1], "-", `\-`); !strings.Contains(page, flag) {
				t.Errorf("sluice.8 lacks %s's flag -%s", c.name, m[1])
			}
		}
	}
	toml := read("packaging/man/sluice.toml.5")
	for _, m := range regexp.MustCompile(`(?m)^## (\[\[?[a-z_]+\]\]?)$`).FindAllStringSubmatch(read("docs/config.md"), -1) {
		if !strings.Contains(toml, ".B "+m[1]+"\n") {
			t.Errorf("sluice.toml.5 has no entry for %s", m[1])
		}
	}
}
