// Package chart holds what the bench module's chart commands share.
package chart

import (
	"fmt"
	"os"

	"gonum.org/v1/plot/vg/vgimg"
)

// WritePNG writes img to path as a PNG.
func WritePNG(img *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("draw %s: %w", path, err)
	}
	return f.Close()
}
