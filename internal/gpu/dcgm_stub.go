//go:build !cgo

package gpu

import (
	"context"
	"errors"
)

// DCGMAvailable says whether this build links go-dcgm (cgo builds do).
const DCGMAvailable = false

// DCGM is not available in a build without cgo: go-dcgm is a cgo binding.
type DCGM struct{}

// NewDCGM fails: this binary was built with CGO_ENABLED=0.
func NewDCGM(string) (*DCGM, error) {
	return nil, errors.New("dcgm: this dra-exporter was built without cgo (CGO_ENABLED=0); go-dcgm needs cgo: " + ErrUnavailable.Error())
}

// Name implements Source.
func (*DCGM) Name() string { return "dcgm" }

// Read implements Source.
func (*DCGM) Read(context.Context) (*Reading, error) { return nil, ErrUnavailable }

// Close implements Source.
func (*DCGM) Close() error { return nil }
