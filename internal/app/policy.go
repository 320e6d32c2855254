package app

import (
	"context"

	"sluice/internal/config"
	"sluice/internal/governor"
	"sluice/internal/policy"
)

type policySession struct {
	d  *Daemon
	ps governor.PolicySession
	pr governor.PolicyRequest
	// attr is attrOf.Attr, made once: the server passes the same Request
	// to every Check of a connection, and a method value made per request
	// would be an allocation per request.
	attrOf *policy.Request
	attr   func(string) (string, bool)
}

func (s *policySession) Check(ctx context.Context, req *policy.Request) (string, error) {
	if s.attrOf != req {
		s.attrOf, s.attr = req, req.Attr
	}
	s.pr = governorRequest(req, s.attr)
	return s.d.gov.Load().PolicyCheck(ctx, &s.ps, &s.pr)
}

// governorRequest is what the governor needs of a policy request; attr is
// req.Attr (made by the caller, once per connection on the door's path).
func governorRequest(req *policy.Request, attr func(string) (string, bool)) governor.PolicyRequest {
	return governor.PolicyRequest{
		ProtocolState:     req.ProtocolState,
		ClientAddress:     req.ClientAddress,
		ClientPort:        req.ClientPort,
		ClientName:        req.ClientName,
		ReverseClientName: req.ReverseClientName,
		HeloName:          req.HeloName,
		Sender:            req.Sender,
		Recipient:         req.Recipient,
		RecipientCount:    req.RecipientCount,
		Size:              req.Size,
		SASLUsername:      req.SASLUsername,
		PolicyContext:     req.PolicyContext,
		Instance:          req.Instance,
		Attr:              attr,
	}
}

func (s *policySession) Close() { s.d.gov.Load().PolicyClose(context.Background(), &s.ps) }

// PolicyRules converts the configured rules for the governor.
func PolicyRules(cfg *config.Config) (governor.PolicyRules, []error) {
	specs, errs := cfg.PolicyRules()
	rules := governor.PolicyRules{Default: cfg.Policy.DefaultAction}
	for _, s := range specs {
		r := governor.PolicyRule{
			Name: s.Name,
			Match: governor.PolicyMatch{
				ClientAddress: s.ClientAddress, ClientName: s.ClientName, ReverseClientName: s.ReverseClientName,
				HeloName: s.HeloName, Sender: s.Sender, SenderDomain: s.SenderDomain, Recipient: s.Recipient,
				RecipientDomain: s.RecipientDomain, SASLUsername: s.SASLUsername, PolicyContext: s.PolicyContext,
				ProtocolState: s.ProtocolState, Class: s.Class,
			},
			Count: s.Count, Stage: s.Stage, Limits: s.Limits, Mode: s.Mode,
			Action: s.Action, DryRun: s.DryRun, Rollback: s.Rollback, Table: s.Table,
		}
		for _, k := range s.Key {
			r.Key = append(r.Key, governor.KeyPart{Attr: k.Attr, V4Prefix: k.V4Prefix, V6Prefix: k.V6Prefix})
		}
		rules.Rules = append(rules.Rules, r)
	}
	return rules, errs
}
