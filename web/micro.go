package web

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// The NATS face of the throttle check (contract section 5).
const (
	ServiceName    = "chatpulse"
	ServiceVersion = "0.1.0"
	CheckSubject   = "chatpulse.throttle.check"
)

// StartMicro registers the chatpulse micro service on nc, with the throttle
// check on chatpulse.throttle.check: the same JSON in and out as POST
// /api/v1/throttle/check; a bad request gets a micro error with code 400.
// Instances share requests through the service's queue group.
func (s *Server) StartMicro(nc *nats.Conn) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "chat analytics and moderation throttling",
	})
	if err != nil {
		return nil, err
	}
	err = svc.AddEndpoint("throttle_check", micro.HandlerFunc(func(req micro.Request) {
		r, err := decodeCheck(req.Data())
		var bad *badRequest
		switch {
		case errors.As(err, &bad):
			req.Error("400", bad.msg, nil)
		case err != nil:
			req.Error("500", "internal error", nil)
		default:
			req.RespondJSON(s.check(r))
		}
	}), micro.WithEndpointSubject(CheckSubject))
	if err != nil {
		svc.Stop()
		return nil, err
	}
	return svc, nil
}
