// Package web is how clients reach chatpulse: the JSON API of contract
// section 3 over HTTP, the throttle check also as a NATS micro service, the
// websocket hub that pushes live views, the embedded dashboard, the
// health, readiness and metrics endpoints, Synapse's spam checks
// (antispam.go: the module synapse-http-antispam's requests, answered in
// Matrix's shape), and the OpenAPI document that describes them
// (openapi.json). Its guard (guard.go) decides, before any
// handler runs, who may use them: the Host a request names, and the bearer
// token when one is configured.
//
// It reads the counts through Views and Throttle (the aggregator and the
// throttle set, or anything that answers the same) and changes them only
// by a consuming check; what Synapse's checks allow it hands to
// Options.File, never to the bus itself. The wall clock comes in through
// Options.Now.
package web
