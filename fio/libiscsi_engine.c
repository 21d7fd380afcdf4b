/*
 * fio's own libiscsi engine, built as an external engine.
 *
 * Debian's fio is configured without --enable-libiscsi, so `ioengine=libiscsi` is not
 * in the binary. The engine's source is in the fio source tree that
 * scripts/build-fio-engine.sh fetches for the installed fio anyway (engines/libiscsi.c,
 * the very same version), so this file compiles it against that tree and libiscsi
 * (Debian's libiscsi-dev) into libfio_libiscsi.so, loaded with
 * `ioengine=external:target/fio/libfio_libiscsi.so`. `sluice bench --compare iscsi`
 * uses it to drive Debian's tgt over iSCSI with the same fio that drives Sluice over
 * NVMe/TCP, so that only the transport and the target differ.
 *
 * Nothing of fio's engine is changed. In fio's own build the engine's ops structure
 * is static (FIO_STATIC) and registered by a constructor; an external engine must
 * instead let fio find it through get_ioengine(), which is all this file adds. (The
 * constructor still runs and registers the same structure under the name "libiscsi",
 * which is harmless: fio resolves external engines by path.)
 */
#include "engines/libiscsi.c"

void get_ioengine(struct ioengine_ops **ops);

void get_ioengine(struct ioengine_ops **ops)
{
	*ops = &ioengine;
}
