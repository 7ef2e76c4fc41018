# syntax=docker/dockerfile:1
# Build stage: the same command .ci/run checks, since CI has no engine.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/chatpulse ./cmd/chatpulse \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/chatgen ./cmd/chatgen

# Runtime: static binaries on distroless, as a non-root user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/chatpulse /out/chatgen /usr/local/bin/
USER nonroot:nonroot
WORKDIR /home/nonroot
ENV CHATPULSE_HTTP=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/chatpulse"]
