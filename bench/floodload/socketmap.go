package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"sluice/bench/internal/postfixrun"
	"sluice/internal/socketmap"
)

// mapAnswer is the socket map's answer for key, a client address: "OK
// reject" inside one of nets, else "NOTFOUND " (postscreen_access_list's
// values).
func mapAnswer(nets []*net.IPNet, key string) string {
	ip := net.ParseIP(strings.TrimSpace(key))
	for _, n := range nets {
		if ip != nil && n.Contains(ip) {
			return "OK reject"
		}
	}
	return "NOTFOUND "
}

// parseNets parses a comma-separated list of CIDR networks.
func parseNets(v string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	for s := range strings.SplitSeq(v, ",") {
		_, n, err := net.ParseCIDR(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no network")
	}
	return out, nil
}

// runSocketmap serves postscreen_access_list as a socket map on a unix
// socket (sluice's socket map server, internal/socketmap, with a lookup
// in a list of networks: the stand-in for class caps answered by sluice),
// prints "ready", and serves until SIGINT or SIGTERM, or until stdin
// reaches end of file when it is a pipe.
func runSocketmap(path, reject string, stdin *os.File, stdout io.Writer) error {
	nets, err := parseNets(reject)
	if err != nil {
		return fmt.Errorf("-reject: %w", err)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o666); err != nil { // postscreen runs as postfix
		ln.Close()
		return err
	}
	srv := socketmap.NewServer(socketmap.HandlerFunc(func(_ context.Context, _, key string) (string, error) {
		return mapAnswer(nets, key), nil
	}), socketmap.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if postfixrun.IsPipe(stdin) {
		go func() { _, _ = io.Copy(io.Discard, stdin); stop() }()
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintln(stdout, "ready")
	<-ctx.Done()
	srv.Close()
	<-done
	return nil
}
