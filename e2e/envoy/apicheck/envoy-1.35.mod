// The oldest Envoy API pdroute documents (Envoy 1.35): go test runs apicheck with
// -modfile=envoy-1.35.mod as well as with go.mod (the newest served version).
module github.com/pdroute/pdroute/e2e/envoy/apicheck

go 1.24

toolchain go1.24.11

require (
	github.com/envoyproxy/go-control-plane/envoy v1.35.0
	google.golang.org/protobuf v1.36.6
)

require (
	cel.dev/expr v0.23.0 // indirect
	github.com/cncf/xds/go v0.0.0-20250326154945-ae57f3c0d45f // indirect
	github.com/envoyproxy/protoc-gen-validate v1.2.1 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20250528174236-200df99c418a // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250528174236-200df99c418a // indirect
)
