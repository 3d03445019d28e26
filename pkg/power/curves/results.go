package curves

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ReadResults reads SPECpower results in the layout of
// shared/fixtures/specpower/results.csv (green-coding-berlin/spec-power-model's
// cleaned data, reduced): id, cpu_name, tdp_w, chips, threads, memory_gb,
// load_{100..10}_watts and active_idle_watts, and cores when present (a
// count that is not a whole number from 1 to the threads is left
// unknown). Rows that fail Validate (missing power, zero threads) are
// skipped and counted, with the first reason; a missing column is an
// error.
func ReadResults(r io.Reader) (results []Result, skipped int, firstSkip error, err error) {
	cr := csv.NewReader(r)
	head, err := cr.Read()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("read header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	need := []string{"id", "cpu_name", "tdp_w", "chips", "threads", "memory_gb", "active_idle_watts"}
	for l := 1; l < NumLevels; l++ {
		need = append(need, fmt.Sprintf("load_%d_watts", l*10))
	}
	for _, n := range need {
		if _, ok := col[n]; !ok {
			return nil, 0, nil, fmt.Errorf("no column %q", n)
		}
	}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, nil, fmt.Errorf("line %d: %w", line, err)
		}
		num := func(name string) float64 {
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[col[name]]), 64)
			if err != nil {
				return 0
			}
			return v
		}
		res := Result{
			ID:        rec[col["id"]],
			CPU:       rec[col["cpu_name"]],
			TDP:       num("tdp_w"),
			Sockets:   int(num("chips")),
			Threads:   int(num("threads")),
			MemoryGiB: num("memory_gb"),
		}
		if i, ok := col["cores"]; ok {
			if c, err := strconv.Atoi(strings.TrimSpace(rec[i])); err == nil && c > 0 && c <= res.Threads {
				res.Cores = c
			}
		}
		if !finite(res.TDP) {
			res.TDP = 0 // "nan": unknown
		}
		res.Watts[0] = num("active_idle_watts")
		for l := 1; l < NumLevels; l++ {
			res.Watts[l] = num(fmt.Sprintf("load_%d_watts", l*10))
		}
		if err := res.Validate(); err != nil || res.MemoryGiB == 0 {
			if err == nil {
				err = fmt.Errorf("%w: no memory size", ErrInput)
			}
			if firstSkip == nil {
				firstSkip = fmt.Errorf("line %d (id %s): %w", line, res.ID, err)
			}
			skipped++
			continue
		}
		results = append(results, res)
	}
	return results, skipped, firstSkip, nil
}
