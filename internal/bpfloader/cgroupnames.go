package bpfloader

import (
	"errors"
	"fmt"
	"path"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/reading"
)

// CgroupNames remembers the path of every cgroup created in the key
// hierarchy while it is loaded, from the kernel's cgroup_mkdir tracepoint,
// so that a cgroup created and removed between two reads is still exported
// under its path rather than its id (bpf/cgroupnames.bpf.c). It answers
// only for cgroups created after it was loaded; older ones are found in
// cgroupfs. It is safe for concurrent use.
type CgroupNames struct {
	objs cgroupnamesObjects
	link link.Link
}

// LoadCgroupNames loads and attaches the cgroup_mkdir program for the key
// hierarchy o.Hierarchy.
func LoadCgroupNames(o Options) (*CgroupNames, error) {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	spec, err := loadCgroupnames()
	if err != nil {
		return nil, err
	}
	hier, subsys, err := hierarchyConsts(o.Hierarchy.Kind)
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[cgroupnamesVarHierarchy].Set(hier); err != nil {
		return nil, fmt.Errorf("set hierarchy: %w", err)
	}
	if err := spec.Variables[cgroupnamesVarV1Subsys].Set(subsys); err != nil {
		return nil, fmt.Errorf("set v1_subsys: %w", err)
	}
	c := &CgroupNames{}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		return nil, explainLoadError(err, log)
	}
	c.link, err = link.AttachTracing(link.TracingOptions{Program: c.objs.CgroupMkdir})
	if err != nil {
		c.objs.Close()
		return nil, explainLoadError(fmt.Errorf("attach tp_btf/cgroup_mkdir: %w", err), log)
	}
	return c, nil
}

// Path returns the path, relative to the key hierarchy's root, of the
// cgroup with this id, if it was created while the program ran. A name the
// kernel truncated, or one that is not a clean absolute path, is not
// returned: a wrong label would be worse than the id.
func (c *CgroupNames) Path(id uint64) (string, bool) {
	var v cgroupnamesCgroupName
	if err := c.objs.CgroupNames.Lookup(id, &v); err != nil {
		return "", false
	}
	b := make([]byte, 0, len(v.Path))
	for _, ch := range v.Path {
		if ch == 0 {
			p := string(b)
			if p == "" || p[0] != '/' || path.Clean(p) != p {
				return "", false
			}
			return p, true
		}
		b = append(b, byte(ch))
	}
	return "", false // no NUL: truncated
}

// ProgramStats returns the cost of the cgroup_mkdir program.
func (c *CgroupNames) ProgramStats() ([]reading.ProgramStat, error) {
	return programStats(map[string]*ebpf.Program{"cgroup_mkdir": c.objs.CgroupMkdir})
}

// Close detaches the program and frees its map.
func (c *CgroupNames) Close() error {
	return errors.Join(c.link.Close(), c.objs.Close())
}
