package web

// CheckRequest answers a throttle check request (contract section 5) that
// came some other way than HTTP, such as NATS request-reply: the answer, or
// an error; the error of a bad request has a method BadRequest.
func (s *Server) CheckRequest(body []byte) (any, error) {
	req, err := decodeCheck(body)
	if err != nil {
		return nil, err
	}
	return s.check(req), nil
}

// BadRequest marks the error as the requester's fault.
func (*badRequest) BadRequest() {}
