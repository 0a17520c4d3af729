package calib

import (
	"math"
	"sort"
)

// Errors summarizes absolute percentage errors |estimate − reference| /
// reference over a class's samples.
type Errors struct {
	N    int
	MAPE float64 // mean, in percent
	P95  float64 // 95th percentile (nearest rank), in percent
	Bias float64 // mean signed error, in percent (negative = underestimate)
}

// Summarize computes Errors for paired estimates and references; pairs with
// a zero reference are skipped.
func Summarize(est, ref []int) Errors {
	var ape []float64
	var sum, bias float64
	for i := range est {
		if ref[i] <= 0 {
			continue
		}
		d := float64(est[i]-ref[i]) / float64(ref[i]) * 100
		ape = append(ape, math.Abs(d))
		sum += math.Abs(d)
		bias += d
	}
	if len(ape) == 0 {
		return Errors{}
	}
	sort.Float64s(ape)
	rank := int(math.Ceil(0.95*float64(len(ape)))) - 1
	return Errors{N: len(ape), MAPE: sum / float64(len(ape)), P95: ape[rank], Bias: bias / float64(len(ape))}
}
