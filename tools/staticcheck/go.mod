// Module staticcheck pins the Go linter honnef.co/go/tools (staticcheck),
// built from source into .cache/tools/staticcheck-<version>/ by `make lint`.
// Its own module, so that its dependencies mix with nothing else.
module github.com/dra-exporter/dra-exporter/tools/staticcheck

go 1.26.0

tool honnef.co/go/tools/cmd/staticcheck

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
)
