package web

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 description of every HTTP endpoint, served
// as written. It is hand-written rather than generated, because its
// schemas say more than the Go types can (name rules, ranges, time
// format, which properties only group mode adds); what keeps it true is
// cmd/chatpulse's TestOpenAPI, which validates real answers of a running
// chatpulse against it.
//
//go:embed openapi.json
var openAPI []byte

// serveOpenAPI is GET /api/v1/openapi.json.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}
