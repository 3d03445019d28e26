package fdinfo

import (
	"reflect"
	"testing"
)

// Real fdinfo of the three drivers (trimmed), as drm-usage-stats.rst
// describes them.
const (
	amdgpu = "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1097\ndrm-driver:\tamdgpu\ndrm-client-id:\t17\n" +
		"drm-pdev:\t0000:03:00.0\npasid:\t32771\ndrm-memory-vram:\t14336 KiB\ndrm-engine-gfx:\t1234567 ns\n" +
		"drm-engine-compute:\t89 ns\ndrm-engine-dec:\t0 ns\n"
	i915 = "drm-driver:\ti915\ndrm-client-id:\t5\ndrm-pdev:\t0000:00:02.0\ndrm-total-system0:\t4 MiB\n" +
		"drm-engine-render:\t25662044495 ns\ndrm-engine-copy:\t0 ns\ndrm-engine-video:\t0 ns\n" +
		"drm-engine-capacity-video:\t2\ndrm-engine-video-enhance:\t0 ns\n"
	xe = "drm-driver:\txe\ndrm-client-id:\t3\ndrm-pdev:\t0000:4D:00.0\ndrm-cycles-rcs:\t28257900\n" +
		"drm-total-cycles-rcs:\t7655183225\ndrm-cycles-bcs:\t0\ndrm-total-cycles-bcs:\t7655183225\n" +
		"drm-engine-capacity-vcs:\t2\n"
)

func TestParse(t *testing.T) {
	c, ok := Parse([]byte(amdgpu))
	if !ok || c.Driver != "amdgpu" || c.ID != 17 || c.PDev != "0000:03:00.0" ||
		!reflect.DeepEqual(c.Busy, map[string]uint64{"gfx": 1234567, "compute": 89, "dec": 0}) {
		t.Errorf("amdgpu: %+v", c)
	}
	c, ok = Parse([]byte(i915))
	if !ok || c.Busy["render"] != 25662044495 || c.Capacity["video"] != 2 || len(c.Busy) != 4 {
		t.Errorf("i915: %+v", c)
	}
	c, ok = Parse([]byte(xe))
	if !ok || c.PDev != "0000:4d:00.0" || c.Cycles["rcs"] != 28257900 || c.TotalCycles["bcs"] != 7655183225 || c.Busy != nil {
		t.Errorf("xe: %+v", c)
	}
	for _, bad := range []string{"pos:\t0\nflags:\t0\n", "drm-driver:\ti915\ndrm-pdev:\t0000:00:02.0\n",
		"drm-driver:\ti915\ndrm-client-id:\tx\ndrm-pdev:\t0000:00:02.0\n", "drm-client-id:\t1\n"} {
		if _, ok := Parse([]byte(bad)); ok {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestDebugfsPIDs(t *testing.T) {
	if _, ok := DebugfsPIDs(t.TempDir()); ok {
		t.Error("no table, yet ok")
	}
}
