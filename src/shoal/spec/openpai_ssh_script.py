"""The shell a task of a job with OpenPAI's ``ssh`` runtime plugin runs first (docs/ssh.md).

POSIX ``sh``, run by ``eval`` in the task's own shell before anything else of its command, as the
task's user (never root), so it works alike in processes and containers:

- an ``sshd`` of the task's own (``/usr/sbin/sshd -D``, its config, host key and
  ``authorized_keys`` in ``$SHOAL_WORKDIR/.ssh``, ``UsePAM no``, ``StrictModes no``) listens on
  the task's port labelled ``ssh``; its host key is the job's (made by the server, published by
  ``GET /api/v1/jobs/{job}/ssh``), so a client can check it;
- a task's uid may have no account on the node (``pool`` mode, docs/security.md), which sshd and
  ssh need: ``libnss_wrapper`` then gives it one (the shoal user's name, home
  ``$SHOAL_WORKDIR``), exported to the task's commands too, so ``ssh`` and ``whoami`` work;
- ``authorized_keys``: the user's registered keys, ``userssh``'s key and (``jobssh``) the job's
  own key, whose private half is ``~/.ssh/id_ed25519``; ``~/.ssh/config`` names every task
  ``ROLE-INDEX`` (OpenPAI's ``${taskrole}-${index}``) with its address and ssh port;
- ``sshbarrier``: waits until ``ssh ROLE-INDEX true`` answers for every other task, or fails the
  task with exit code 10 after the timeout (as OpenPAI's ``sshbarrier.sh``);
- ``~/.ssh/environment`` holds the task's variables, so an ssh session sees what the task sees.

A node or image without ``sshd`` (or without an account and ``libnss_wrapper``) says so on the
task's stderr and runs the task anyway, as OpenPAI's plugin did without ``sshd``.
"""

from __future__ import annotations

SETUP_SCRIPT = r"""# shoal: OpenPAI's ssh runtime plugin (docs/ssh.md)
shoal_ssh_say() { printf 'shoal: ssh: %s\n' "$*" >&2; }
shoal_ssh_nss_lib() {
  for shoal_ssh_lib in /usr/lib/*/libnss_wrapper.so /usr/lib64/libnss_wrapper.so \
      /usr/lib/libnss_wrapper.so; do
    if [ -e "$shoal_ssh_lib" ]; then printf '%s' "$shoal_ssh_lib"; return 0; fi
  done
  return 1
}
shoal_ssh_account() {
  grep -v -e "^$shoal_ssh_name:" -e "^[^:]*:[^:]*:$shoal_ssh_uid:" /etc/passwd \
    > "$shoal_ssh_dir/passwd"
  printf '%s:x:%s:%s:shoal task:%s:%s\n' "$shoal_ssh_name" "$shoal_ssh_uid" "$shoal_ssh_gid" \
    "$SHOAL_WORKDIR" "$shoal_ssh_shell" >> "$shoal_ssh_dir/passwd"
  grep -v -e "^$shoal_ssh_name:" -e "^[^:]*:[^:]*:$shoal_ssh_gid:" /etc/group \
    > "$shoal_ssh_dir/group"
  printf '%s:x:%s:\n' "$shoal_ssh_name" "$shoal_ssh_gid" >> "$shoal_ssh_dir/group"
}
shoal_ssh_peers() {
  for shoal_ssh_task in $(printf '%s' "${PAI_TASK_ROLE_INSTANCES:-}" | tr ',' ' '); do
    shoal_ssh_r=${shoal_ssh_task%%:*}
    shoal_ssh_i=${shoal_ssh_task##*:}
    eval "shoal_ssh_h=\${PAI_HOST_IP_${shoal_ssh_r}_${shoal_ssh_i}:-}"
    eval "shoal_ssh_p=\${PAI_${shoal_ssh_r}_${shoal_ssh_i}_ssh_PORT:-}"
    if [ -z "$shoal_ssh_p" ]; then continue; fi
    printf 'Host %s-%s\n  HostName %s\n  Port %s\n  User %s\n' "$shoal_ssh_r" "$shoal_ssh_i" \
      "$shoal_ssh_h" "${shoal_ssh_p%%,*}" "$shoal_ssh_name"
    printf '  IdentityFile "%s/id_ed25519"\n  UserKnownHostsFile "%s/known_hosts"\n' \
      "$shoal_ssh_dir" "$shoal_ssh_dir"
    printf '  HostKeyAlias shoal-job-host\n  StrictHostKeyChecking yes\n'
  done
}
shoal_ssh_sshd_config() {
  printf 'Port %s\nHostKey "%s/ssh_host_ed25519_key"\nPidFile none\n' \
    "${SHOAL_SSH_PORT%%,*}" "$shoal_ssh_dir"
  printf 'AuthorizedKeysFile "%s/authorized_keys"\n' "$shoal_ssh_dir"
  printf '%s\n' 'PubkeyAuthentication yes' 'PasswordAuthentication no' \
    'KbdInteractiveAuthentication no' 'UsePAM no' 'StrictModes no' \
    'PermitUserEnvironment yes' 'PrintMotd no' 'PrintLastLog no' 'UseDNS no' \
    'X11Forwarding no' 'Subsystem sftp internal-sftp' 'LogLevel VERBOSE'
}
shoal_ssh_files() {
  umask 077
  printf '%s\n' "$shoal_ssh_host_key" > "$shoal_ssh_dir/ssh_host_ed25519_key" || return 1
  printf '%s\n' "$SHOAL_SSH_HOST_PUBLIC_KEY" > "$shoal_ssh_dir/ssh_host_ed25519_key.pub"
  printf 'shoal-job-host %s\n' "$SHOAL_SSH_HOST_PUBLIC_KEY" > "$shoal_ssh_dir/known_hosts"
  {
    printf '%s\n' "${SHOAL_SSH_AUTHORIZED_KEYS:-}" "${SHOAL_SSH_CUSTOM_KEY:-}"
    if [ "${SHOAL_SSH_JOBSSH:-}" = true ]; then printf '%s\n' "$SHOAL_SSH_JOB_PUBLIC_KEY"; fi
  } | grep -v '^[[:space:]]*$' > "$shoal_ssh_dir/authorized_keys"
  if [ "${SHOAL_SSH_JOBSSH:-}" = true ]; then
    printf '%s\n' "$shoal_ssh_job_key" > "$shoal_ssh_dir/id_ed25519"
    printf '%s\n' "$SHOAL_SSH_JOB_PUBLIC_KEY" > "$shoal_ssh_dir/id_ed25519.pub"
    shoal_ssh_peers > "$shoal_ssh_dir/config"
  fi
  env -u SHOAL_SSH_SETUP -u SHOAL_SSH_AUTHORIZED_KEYS | grep '^[A-Za-z_][A-Za-z0-9_]*=' \
    > "$shoal_ssh_dir/environment"
  shoal_ssh_sshd_config > "$shoal_ssh_dir/sshd_config"
}
shoal_ssh_start() {
  shoal_ssh_pid=$(/usr/sbin/sshd -D -f "$shoal_ssh_dir/sshd_config" -E "$shoal_ssh_dir/sshd.log" \
    </dev/null >/dev/null 2>&1 & echo $!)
  sleep 0.3
  if ! kill -0 "$shoal_ssh_pid" 2>/dev/null; then
    shoal_ssh_say "sshd did not start (port ${SHOAL_SSH_PORT%%,*}); its log:"
    cat "$shoal_ssh_dir/sshd.log" >&2
    return 1
  fi
}
shoal_ssh_barrier() {
  shoal_ssh_end=$(( $(date +%s) + SHOAL_SSH_BARRIER_S ))
  shoal_ssh_me="${SHOAL_TASK_ROLE:-}-${SHOAL_TASK_INDEX:-}"
  shoal_ssh_left=$(sed -n 's/^Host //p' "$shoal_ssh_dir/config" | grep -v -x -e "$shoal_ssh_me")
  while [ -n "$shoal_ssh_left" ]; do
    shoal_ssh_failed=
    for shoal_ssh_peer in $shoal_ssh_left; do
      ssh -q -o BatchMode=yes -o ConnectTimeout=5 "$shoal_ssh_peer" true </dev/null \
        || shoal_ssh_failed="$shoal_ssh_failed $shoal_ssh_peer"
    done
    shoal_ssh_left=$shoal_ssh_failed
    if [ -z "$shoal_ssh_left" ]; then break; fi
    if [ "$(date +%s)" -ge "$shoal_ssh_end" ]; then
      shoal_ssh_say "sshbarrier: no answer after ${SHOAL_SSH_BARRIER_S}s from:$shoal_ssh_left"
      return 10
    fi
    sleep 2
  done
  shoal_ssh_say "sshbarrier: every task of the job answers ssh"
}
shoal_ssh_main() {
  if [ ! -x /usr/sbin/sshd ]; then
    shoal_ssh_say "/usr/sbin/sshd is not installed here (openssh-server): no ssh into this task"
    return 0
  fi
  case "$shoal_ssh_host_key" in
    -----BEGIN*) ;;
    *) shoal_ssh_say "the job has no ssh keys (submit it to a shoal server)"; return 0 ;;
  esac
  SHOAL_SSH_PORT=${SHOAL_PORTS_ssh:-}
  if [ -z "$SHOAL_SSH_PORT" ]; then shoal_ssh_say "the task has no port labelled ssh"; return 0; fi
  shoal_ssh_dir="$SHOAL_WORKDIR/.ssh"
  (umask 077 && mkdir -p "$shoal_ssh_dir") || return 1
  shoal_ssh_uid=$(id -u)
  shoal_ssh_gid=$(id -g)
  shoal_ssh_name=${SHOAL_USER:-task}
  shoal_ssh_shell=/bin/sh
  if [ -x /bin/bash ]; then shoal_ssh_shell=/bin/bash; fi
  if shoal_ssh_lib=$(shoal_ssh_nss_lib); then
    shoal_ssh_account || return 1
    LD_PRELOAD="$shoal_ssh_lib${LD_PRELOAD:+ $LD_PRELOAD}"
    NSS_WRAPPER_PASSWD="$shoal_ssh_dir/passwd"
    NSS_WRAPPER_GROUP="$shoal_ssh_dir/group"
    export LD_PRELOAD NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
  elif ! id -un >/dev/null 2>&1; then
    shoal_ssh_say "uid $shoal_ssh_uid has no account here and libnss_wrapper is not installed"
    shoal_ssh_say "(apt-get install libnss-wrapper): sshd cannot log anyone in"
    return 0
  fi
  (shoal_ssh_files) || return 1
  shoal_ssh_start || return 1
  if [ "${SHOAL_SSH_JOBSSH:-}" = true ] && [ -n "${SHOAL_SSH_BARRIER_S:-}" ]; then
    shoal_ssh_barrier || return $?
  fi
}
shoal_ssh_main
shoal_ssh_rc=$?
unset shoal_ssh_job_key shoal_ssh_host_key
if [ "$shoal_ssh_rc" -ne 0 ]; then exit "$shoal_ssh_rc"; fi
unset shoal_ssh_rc
"""
