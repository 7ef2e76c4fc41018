package web

import "github.com/chatpulse/chatpulse/aggregator"

// Requests is how the views of docs/contract.md section 3 are answered over other
// transports than HTTP (NATS request-reply): by view, each takes the
// request's body and gives the answer (the HTTP body's value) or an error;
// a bad request's error has a method BadRequest. CheckRequest answers the
// throttle check.
func (s *Server) Requests() map[aggregator.View]func(body []byte) (any, error) {
	view := func(v func(params) (any, error)) func([]byte) (any, error) {
		return func(body []byte) (any, error) {
			if len(body) == 0 {
				body = []byte("{}")
			}
			if len(body) > maxCheckBody {
				return nil, badf("request over %d bytes", maxCheckBody)
			}
			f, err := decodeObject(body, viewShape, viewFields)
			if err != nil {
				return nil, err
			}
			return v(f)
		}
	}
	return map[aggregator.View]func([]byte) (any, error){
		aggregator.ViewWindows:  view(s.windows),
		aggregator.ViewOverview: view(s.overview),
		aggregator.ViewRooms:    view(s.rooms),
		aggregator.ViewRoom:     view(s.room),
		aggregator.ViewUser:     view(s.user),
	}
}

const viewShape = `a view request is a JSON object with some of {"window": string, "k": integer, "limit": integer, "room": string, "user": string}`

var viewFields = map[string]kind{"window": text, "k": integer, "limit": integer, "room": name, "user": name}
