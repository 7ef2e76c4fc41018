package web

// Requests is how the views of contract section 3 and the throttle check
// are answered over other transports than HTTP (NATS request-reply): by
// name, each takes the request's body and gives the answer (the HTTP
// body's value) or an error; a bad request's error has a method
// BadRequest.
func (s *Server) Requests() map[string]func(body []byte) (any, error) {
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
	return map[string]func([]byte) (any, error){
		"windows":  view(s.windows),
		"overview": view(s.overview),
		"rooms":    view(s.rooms),
		"room":     view(s.room),
		"user":     view(s.user),
		"check":    s.CheckRequest,
	}
}

const viewShape = `a view request is a JSON object with some of {"window": string, "k": integer, "limit": integer, "room": string, "user": string}`

var viewFields = map[string]kind{"window": text, "k": integer, "limit": integer, "room": name, "user": name}
