package app

import (
	"context"

	"sluice/internal/anvil"
	"sluice/internal/governor"
)

// anvilHandler opens a session per anvil stream (one smtpd process).
type anvilHandler struct{ d *Daemon }

// NewSession opens the session of smtpd process pid's stream.
func (h anvilHandler) NewSession(pid int) anvil.Session {
	s := &anvilSession{d: h.d}
	s.st.SetPeerPID(pid)
	return s
}

type anvilSession struct {
	d  *Daemon
	st governor.AnvilStream
}

var anvilEvents = map[anvil.Request]governor.AnvilEvent{
	anvil.Message:   governor.AnvilMail,
	anvil.Recipient: governor.AnvilRcpt,
	anvil.NewTLS:    governor.AnvilNewTLS,
	anvil.Auth:      governor.AnvilAuth,
	anvil.TLSTrace:  governor.AnvilTLSTr,
}

func (s *anvilSession) Connect(ctx context.Context, ident string) (int64, int64, error) {
	return s.d.gov.Load().AnvilConnect(ctx, &s.st, ident)
}

func (s *anvilSession) Disconnect(ctx context.Context, ident string) error {
	s.d.gov.Load().AnvilDisconnect(ctx, &s.st, ident)
	return nil
}

func (s *anvilSession) Event(ctx context.Context, req anvil.Request, ident string) (int64, error) {
	return s.d.gov.Load().AnvilEvent(ctx, &s.st, anvilEvents[req], ident)
}

func (s *anvilSession) NewTLSStatus(ctx context.Context, ident string) (int64, error) {
	return s.d.gov.Load().AnvilNewTLSStatus(ctx, ident)
}

func (s *anvilSession) Lookup(ctx context.Context, ident string) (anvil.Counts, error) {
	c, err := s.d.gov.Load().AnvilLookup(ctx, ident)
	r := c.Rates
	return anvil.Counts{
		Count: c.Count, Rate: r[governor.AnvilConn], Mail: r[governor.AnvilMail],
		Rcpt: r[governor.AnvilRcpt], NewTLS: r[governor.AnvilNewTLS], Auth: r[governor.AnvilAuth],
	}, err
}

func (s *anvilSession) Holding() bool { return s.st.Holding() }

// Close drops what the stream held. A stream closed while the daemon
// stops, in the middle of an SMTP session, hands the session to the next
// start (see Daemon.Shutdown).
func (s *anvilSession) Close() {
	if id := s.st.StreamIdent(); id != "" && s.d.stopping.Load() {
		s.d.carryMu.Lock()
		s.d.carryOut = append(s.d.carryOut, id)
		s.d.carryMu.Unlock()
	}
	s.d.gov.Load().AnvilClose(context.Background(), &s.st)
}
