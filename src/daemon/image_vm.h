/*
 * image_vm.h - the microvm backend's part of `ephemerald image build`.
 *
 * Next to a built image (CACHE/images/<key>/rootfs) it makes CACHE/images/<key>/microvm/:
 *
 *   root.img   the rootfs as an ext4 file system without a journal (mkfs.ext4 -d, no mount),
 *              which QEMU attaches read-only as the guest's /dev/vda
 *   kernel     a symbolic link to CACHE/kernels/<package>_<version>/, which holds the vmlinuz of
 *              Debian's cloud kernel, its config, and modules/NN-name.ko: the modules the guest
 *              needs that this kernel does not build in, in load order
 *   complete   written last; names the recipe and the kernel
 *
 * The kernel package is fetched with `apt-get download` and unpacked with `dpkg-deb -x` into a
 * temporary directory: nothing is installed on the host (no initramfs or bootloader hooks run).
 * Both pieces are cached: an unchanged image and an unchanged kernel version cost nothing.
 *
 * The initramfs is not built here: it carries ephemeral-init, which changes with every build of
 * the project, so the backend assembles it in memory from that binary and these modules.
 */
#ifndef EPH_DAEMON_IMAGE_VM_H
#define EPH_DAEMON_IMAGE_VM_H

#include <stdbool.h>

/* cache_root: CACHE above; image_dir: CACHE/images/<key> (holding rootfs/). Returns 0, or a
 * negative errno after printing why on stderr. */
int eph_image_vm_build(const char *cache_root, const char *image_dir, bool quiet)
    __attribute__((warn_unused_result));

#endif
