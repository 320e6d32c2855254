package web

import "net/http"

// Handler returns every route, the status page included: the choice by
// listener and the connection cap are Serve's. Without Serve no sampling
// runs: /status.json then samples on demand.
func (s *Server) Handler() http.Handler { return s.handler }
