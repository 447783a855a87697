#!/usr/bin/env bash
# Starts a program as a pod of deploy/kubernetes starts its container, with
# no Kubernetes: a root of its own that is read-only (the host's /usr, /etc,
# /proc, /sys and /dev in it, as an image's would be), the pod's volumes
# mounted at their paths, then the program run from the pod's working
# directory, with exactly the pod's environment, as the pod's user and
# group, without capabilities and with no_new_privs (runAsUser, runAsGroup,
# fsGroup, allowPrivilegeEscalation: false, capabilities: drop ALL).
#
# Run it as root, in a mount namespace of its own:
#   unshare --mount --propagation private -- bash tests/deploy/pod.sh \
#     ROOT UID GID WORKDIR ENVFILE [MOUNT ...] -- PROGRAM [ARG ...]
# ROOT: an empty directory (the root is a tmpfs mounted on it, in the
# namespace only); ENVFILE: the environment, one NAME=VALUE a line; each
# MOUNT is `bind:SOURCE:PATH` (a volume), `tmpfs:PATH` (an emptyDir),
# `file:SOURCE:PATH` (a file of the image, such as its binary) or
# `dir:PATH` (an empty directory of the image). The program
# replaces this shell (exec all the way), so its pid is the caller's child.
set -euo pipefail

root=$1 uid=$2 gid=$3 workdir=$4 envfile=$5
shift 5

mount -t tmpfs -o mode=755 pod-root "$root"
for dir in usr etc proc sys dev bin sbin lib lib32 lib64; do
  if [ -L "/$dir" ]; then
    ln -s "$(readlink "/$dir")" "$root/$dir"
  elif [ -d "/$dir" ]; then
    mkdir "$root/$dir"
    mount --rbind "/$dir" "$root/$dir"
  fi
done

readonly_mounts=("$root/usr" "$root/etc")
while [ "$1" != "--" ]; do
  IFS=: read -r kind source path <<<"$1"
  case "$kind" in
    bind)
      mkdir -p "$root$path"
      mount --bind "$source" "$root$path"
      ;;
    tmpfs)
      path=$source
      mkdir -p "$root$path"
      mount -t tmpfs -o mode=1777 tmpfs "$root$path"
      ;;
    dir)
      mkdir -p "$root$source"
      ;;
    file)
      # Its directory becomes a tmpfs of the image's own (the host's is
      # not touched), holding the file alone.
      dir=$(dirname "$path")
      mkdir -p "$root$dir"
      mount -t tmpfs -o mode=755 image-files "$root$dir"
      touch "$root$path"
      mount --bind "$source" "$root$path"
      readonly_mounts+=("$root$dir")
      ;;
    *)
      echo "pod.sh: unknown mount $1" >&2
      exit 2
      ;;
  esac
  shift
done
shift

# The image's files are read-only (readOnlyRootFilesystem); volumes are not.
for mount_point in "${readonly_mounts[@]}"; do
  mount -o remount,bind,ro "$mount_point"
done
mount -o remount,ro "$root"

mapfile -t environment <"$envfile"
exec chroot "$root" /usr/bin/env -i -C "$workdir" "${environment[@]}" \
  /usr/bin/setpriv --reuid="$uid" --regid="$gid" --groups="$gid" \
  --no-new-privs --inh-caps=-all --bounding-set=-all -- "$@"
