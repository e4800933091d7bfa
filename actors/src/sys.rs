//! Every call gm makes to the operating system beyond the standard library: stdin's file
//! flags, process groups and signals, and `/proc`. A port to another OS changes this module.
//!
//! Only Linux (x86_64) is built and tested; the `cfg` branches keep the rest compiling where
//! an equivalent exists.

use std::sync::atomic::{AtomicI32, Ordering};

/// stdin's file status flags before gm changed them, or -1 when it did not.
static STDIN_FLAGS: AtomicI32 = AtomicI32::new(-1);

/// Puts stdin in non-blocking mode (so it can be polled on the arbiter) and remembers how it
/// was, for [`restore_stdin`]. False when stdin cannot be changed.
pub fn set_stdin_nonblocking() -> bool {
    // SAFETY: fcntl on fd 0 with F_GETFL/F_SETFL touches no memory of ours.
    let flags = unsafe { libc::fcntl(0, libc::F_GETFL) };
    if flags < 0 {
        return false;
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(0, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return false;
    }
    STDIN_FLAGS.store(flags, Ordering::SeqCst);
    true
}

/// Gives stdin back the flags it had before [`set_stdin_nonblocking`]. The flags belong to the
/// open file description, which the parent shares: left non-blocking, the parent's next read
/// of its terminal or pipe fails with EAGAIN.
pub fn restore_stdin() {
    let flags = STDIN_FLAGS.swap(-1, Ordering::SeqCst);
    if flags >= 0 {
        // SAFETY: as above.
        unsafe { libc::fcntl(0, libc::F_SETFL, flags) };
    }
}

/// Whether a short read from fd 0 means it was drained: true of a pipe or a socket (a read
/// returns what is there, up to the buffer), not of a terminal (a read returns one line).
pub fn stdin_is_pipe_or_socket() -> bool {
    // SAFETY: fstat writes into the zeroed stat we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(0, &mut st) } != 0 {
        return false;
    }
    matches!(st.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFSOCK)
}

/// Reads at most `buf.len()` bytes from fd 0.
pub fn read_stdin(buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: reads at most buf.len() bytes into buf, which we own.
    let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Waits up to `timeout` for `fd` to have something to read (or to be closed); false when the
/// time ran out.
pub fn wait_readable(fd: std::os::fd::RawFd, timeout: std::time::Duration) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    loop {
        // SAFETY: poll(2) on one pollfd we own.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Waits until one of `fds` has something to read (or was closed), up to `timeout` (`None`:
/// no limit); says which. A negative descriptor is left out, as poll(2) does. An interrupted
/// wait says nothing is ready, so the caller looks at its clocks and waits again.
pub fn poll_readable<const N: usize>(
    fds: [std::os::fd::RawFd; N],
    timeout: Option<std::time::Duration>,
) -> std::io::Result<[bool; N]> {
    let mut pfds = fds.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
    // Rounded up: a wait of 0.4 ms must not spin as a wait of 0.
    let ms = timeout.map_or(-1, |t| libc::c_int::try_from(t.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX));
    // SAFETY: poll(2) on N pollfds we own, for the duration of the call.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), N as libc::nfds_t, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == std::io::ErrorKind::Interrupted { Ok([false; N]) } else { Err(e) };
    }
    Ok(pfds.map(|p| p.fd >= 0 && p.revents != 0))
}

/// A descriptor that becomes readable when the process `pid` (a child of ours, not yet
/// reaped) exits; `None` where the kernel has no pidfd (before Linux 5.3, other systems).
pub fn process_exit_fd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: the descriptor was just returned to us and nothing else owns it.
        Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// Something whose readiness can be polled: a pipe, stdin (a descriptor on Unix).
#[cfg(unix)]
pub trait Pollable: std::os::fd::AsRawFd {}
#[cfg(unix)]
impl<T: std::os::fd::AsRawFd> Pollable for T {}
#[cfg(not(unix))]
pub trait Pollable {}
#[cfg(not(unix))]
impl<T> Pollable for T {}

/// Whether `input` has bytes to read now (or was closed). Always false where readiness
/// cannot be polled.
pub fn input_waiting(input: &impl Pollable) -> bool {
    #[cfg(unix)]
    return wait_readable(input.as_raw_fd(), std::time::Duration::ZERO).unwrap_or(false);
    #[cfg(not(unix))]
    {
        let _ = input;
        false
    }
}

/// Gives way to other threads once, then says whether `input` has bytes to read now: a relay
/// that finds more waiting writes it on with what it holds, in one write instead of two.
/// Always false where readiness cannot be polled.
pub fn more_input_soon(input: &impl Pollable) -> bool {
    std::thread::yield_now();
    input_waiting(input)
}

/// A file's identity on its filesystem (device, inode): two paths to one file give the same.
/// None where the OS does not say.
pub fn file_identity(meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// Reads into `buf` from `offset` without moving the file's cursor (one pread); returns how
/// many bytes were read.
pub fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    #[cfg(unix)]
    return std::os::unix::fs::FileExt::read_at(file, buf, offset);
    #[cfg(windows)]
    return std::os::windows::fs::FileExt::seek_read(file, buf, offset);
}

/// Fills `buf` from `offset` (see [`read_at`]); a file that ends first is `UnexpectedEof`.
pub fn read_exact_at(file: &std::fs::File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match read_at(file, buf, offset) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` at `offset` without moving the file's cursor.
pub fn write_all_at(file: &std::fs::File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    return std::os::unix::fs::FileExt::write_all_at(file, buf, offset);
    #[cfg(windows)]
    {
        let (mut buf, mut offset) = (buf, offset);
        while !buf.is_empty() {
            let n = std::os::windows::fs::FileExt::seek_write(file, buf, offset)?;
            buf = &buf[n..];
            offset += n as u64;
        }
        Ok(())
    }
}

/// A file that lives in memory only, shared with another process by passing its descriptor
/// (closed on exec). Outlives whichever holder dies first.
#[cfg(target_os = "linux")]
pub fn memory_file(name: &std::ffi::CStr) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create(2) with a NUL-terminated name; the descriptor is owned once below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nothing else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// A window of a shared memory file ([`memory_file`]) mapped into this process: a write lands
/// in the file at once, with no system call, and stays there for the file's other holders if
/// this process dies right after.
#[cfg(target_os = "linux")]
pub struct SharedWindow {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    /// Where the window starts in the file.
    offset: u64,
}

#[cfg(target_os = "linux")]
impl SharedWindow {
    /// Maps `len` bytes of `file` from `offset` (a multiple of the page size); the file must
    /// be at least that long (reading past its end would raise SIGBUS).
    pub fn map(file: &std::fs::File, offset: u64, len: usize) -> std::io::Result<SharedWindow> {
        use std::os::fd::AsRawFd;
        let size = file.metadata()?.len();
        if offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "the window passes the file's end"));
        }
        let file_offset = libc::off_t::try_from(offset).map_err(std::io::Error::other)?;
        // SAFETY: a new shared mapping of a file we hold, within its length (checked above);
        // nothing else is mapped at the address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                file_offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(ptr.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap gave null"))?;
        Ok(SharedWindow { ptr, len, offset })
    }

    /// Writes `bytes` at file offset `at` if they fall inside the window; false otherwise.
    pub fn write(&self, at: u64, bytes: &[u8]) -> bool {
        let Some(start) = at.checked_sub(self.offset).and_then(|s| usize::try_from(s).ok()) else { return false };
        if start.checked_add(bytes.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: [start, start + len) lies inside the mapping (checked above), which lives as
        // long as `self`; `bytes` is our own memory, so the two cannot overlap. No Rust
        // reference into the mapping exists: other processes' reads see plain bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(start), bytes.len()) };
        true
    }
}

#[cfg(target_os = "linux")]
impl Drop for SharedWindow {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `map` made; no reference into it outlives self.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Whether `fd` is a pipe or a socket: what a worker can read and write in a host's place
/// (a terminal or a file cannot be polled as a stream, or peeked).
pub fn is_pipe_or_socket(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: fstat writes into the zeroed stat we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    matches!(st.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFSOCK)
}

/// Whether `fd` is a socket (else a pipe, by [`is_pipe_or_socket`]).
fn is_socket(fd: std::os::fd::RawFd) -> bool {
    // SAFETY: as in is_pipe_or_socket.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0) && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
}

/// Whether `fd` is a socket.
pub fn is_socket_fd(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    is_socket(fd.as_raw_fd())
}

/// Makes `fd` blocking again (a worker that read a host's stdin made it non-blocking, and
/// the flag belongs to the open file, which the relay shares).
pub fn set_blocking(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl(2) on a descriptor we hold.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until `input` has something to read (or is closed) or `stop` has: true for the
/// first, false once `stop` has (it wins when both have).
pub fn wait_either(input: std::os::fd::RawFd, stop: std::os::fd::RawFd) -> std::io::Result<bool> {
    let mut fds = [
        libc::pollfd { fd: input, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: stop, events: libc::POLLIN, revents: 0 },
    ];
    loop {
        // SAFETY: poll(2) on two pollfds we own.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            return Ok(false);
        }
        if fds[0].revents != 0 {
            return Ok(true);
        }
    }
}

/// Copies up to `buf.len()` bytes waiting on `fd` (a pipe or a socket) into `buf` without
/// taking them: a pipe's are duplicated with tee(2) into `scratch` (an empty pipe: its read
/// end, its write end) and read from there, a socket's read with MSG_PEEK. Never waits:
/// nothing there is `WouldBlock`; `Ok(0)` is the end (the writers closed and nothing is left).
pub fn peek_input(
    fd: std::os::fd::BorrowedFd<'_>,
    scratch: Option<(std::os::fd::BorrowedFd<'_>, std::os::fd::BorrowedFd<'_>)>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let Some((scratch_r, scratch_w)) = scratch else {
        // SAFETY: recv(2) into a buffer we hold, of its length.
        let n = unsafe {
            libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_PEEK | libc::MSG_DONTWAIT)
        };
        return usize::try_from(n).map_err(|_| std::io::Error::last_os_error());
    };
    // SAFETY: tee(2) between two pipes we hold; it copies references to the pages only.
    let n = unsafe { libc::tee(fd.as_raw_fd(), scratch_w.as_raw_fd(), buf.len(), libc::SPLICE_F_NONBLOCK) };
    let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    let mut got = 0;
    while got < n {
        // SAFETY: read(2) into the rest of a buffer we hold; the scratch pipe holds exactly
        // the `n` bytes tee put there.
        let r = unsafe { libc::read(scratch_r.as_raw_fd(), buf[got..n].as_mut_ptr().cast(), n - got) };
        match usize::try_from(r) {
            Ok(0) => break,
            Ok(r) => got += r,
            Err(_) => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(got)
}

/// Moves up to `len` bytes from the pipe `from` to `to` (a pipe or a socket) with splice(2),
/// without waiting: a full `to` is `WouldBlock`. A pipe's page moves whole or not at all.
pub fn splice_out(
    from: std::os::fd::BorrowedFd<'_>,
    to: std::os::fd::BorrowedFd<'_>,
    len: usize,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: splice(2) between two descriptors we hold, no offsets.
    let n = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
        )
    };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// Writes `buf` to `fd` once, without waiting; returns how much went.
pub fn write_once(fd: std::os::fd::BorrowedFd<'_>, buf: &[u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: write(2) from a buffer we hold, of its length.
    let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// Reads what is waiting on `fd` (non-blocking) into `out`, until nothing is left.
pub fn drain(fd: std::os::fd::BorrowedFd<'_>, out: &mut Vec<u8>) {
    use std::os::fd::AsRawFd;
    let mut buf = [0u8; 16 << 10];
    loop {
        // SAFETY: read(2) into a buffer we hold, of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match usize::try_from(n) {
            Ok(0) => return,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// A pipe whose ends never block, for [`peek_input`]'s copies: (read end, write end).
pub fn scratch_pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) fills two descriptors, each owned once below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nothing else.
    Ok(unsafe { (std::os::fd::OwnedFd::from_raw_fd(fds[0]), std::os::fd::OwnedFd::from_raw_fd(fds[1])) })
}

/// Reads and drops exactly `n` bytes waiting on `fd` (seen by [`peek_input`] first, so they
/// are there and the reads do not wait), through `sink`.
pub fn take_input(fd: std::os::fd::BorrowedFd<'_>, mut n: usize, sink: &mut [u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while n > 0 {
        let len = n.min(sink.len());
        // SAFETY: read(2) into a buffer we hold, at most its length.
        let r = unsafe { libc::read(fd.as_raw_fd(), sink.as_mut_ptr().cast(), len) };
        match usize::try_from(r) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(r) => n -= r,
            Err(_) => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Writes all of `buf` to `fd`, which may be non-blocking (a host's stdout a worker also
/// writes to): a full pipe is waited for.
pub fn write_all_fd(fd: std::os::fd::BorrowedFd<'_>, mut buf: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        // SAFETY: write(2) from a buffer we hold, of its length.
        let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        match usize::try_from(n) {
            Ok(n) => buf = &buf[n..],
            Err(_) => {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::Interrupted => {}
                    std::io::ErrorKind::WouldBlock => {
                        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                        // SAFETY: poll(2) on one pollfd we own.
                        unsafe { libc::poll(&mut pfd, 1, 1000) };
                    }
                    _ => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// A write of at most this many bytes to a pipe is all or nothing (POSIX PIPE_BUF); to a
/// Unix socket too (one buffer of its own).
pub const ATOMIC_WRITE: usize = 4096;

/// Whether anyone may execute the file (a script without an extension); false where the OS
/// keeps no such bit.
pub fn is_executable(meta: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        false
    }
}

/// What a freshness check asks of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub len: u64,
    /// Nanoseconds since the epoch; 0 for a time before it.
    pub mtime_ns: u64,
    pub is_file: bool,
    /// See [`is_executable`].
    pub executable: bool,
    /// The inode (0 where the OS has none): a file replaced by another of the same size and
    /// mtime (`rsync -a`, `cp -p`, a rename over it) still differs here.
    pub ino: u64,
}

impl FileStat {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        let since_epoch = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        Self {
            len: meta.len(),
            mtime_ns: since_epoch.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            is_file: meta.is_file(),
            executable: is_executable(meta),
            ino: inode(meta),
        }
    }
}

/// Whether `fd` has something to read within `wait` (an interrupted wait counts as nothing).
#[cfg(unix)]
pub fn readable_within(fd: std::os::fd::BorrowedFd<'_>, wait: std::time::Duration) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    match unsafe { libc::poll(&mut pfd, 1, ms) } {
        n if n > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// A file's inode number; 0 where the OS has none.
pub fn inode(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::ino(meta)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        0
    }
}

/// The stat of each of `names` in `dir`, links followed as `std::fs::metadata` follows them;
/// `None` for one that is gone. On Unix each is asked relative to the open directory: the
/// kernel walks one name instead of the whole path, which was half the time of checking a
/// kernel tree's 60,000 files.
pub fn stat_names(dir: &std::path::Path, names: &[&std::ffi::OsStr]) -> Vec<Option<FileStat>> {
    #[cfg(unix)]
    {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        use std::os::unix::ffi::OsStrExt;
        let by_path = |name: &std::ffi::OsStr| std::fs::metadata(dir.join(name)).ok().map(|m| FileStat::of(&m));
        let Ok(c_dir) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return names.iter().map(|n| by_path(n)).collect();
        };
        // SAFETY: a valid NUL-terminated path; the descriptor returned is owned below.
        let fd = unsafe { libc::open(c_dir.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return names.iter().map(|n| by_path(n)).collect();
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let dir_fd = unsafe { OwnedFd::from_raw_fd(fd) };
        names
            .iter()
            .map(|name| {
                let c_name = std::ffi::CString::new(name.as_bytes()).ok()?;
                // SAFETY: `stat` is plain old data, filled by the call.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: an open directory, a NUL-terminated name, a valid out-pointer.
                if unsafe { libc::fstatat(dir_fd.as_raw_fd(), c_name.as_ptr(), &mut st, 0) } != 0 {
                    return None;
                }
                let mtime_ns = u64::try_from(st.st_mtime)
                    .ok()
                    .and_then(|s| s.checked_mul(1_000_000_000))
                    .and_then(|ns| ns.checked_add(u64::try_from(st.st_mtime_nsec).ok()?))
                    .unwrap_or(if st.st_mtime < 0 { 0 } else { u64::MAX });
                Some(FileStat {
                    len: u64::try_from(st.st_size).unwrap_or(0),
                    mtime_ns,
                    is_file: st.st_mode & libc::S_IFMT == libc::S_IFREG,
                    executable: st.st_mode & 0o111 != 0,
                    ino: st.st_ino,
                })
            })
            .collect()
    }
    #[cfg(not(unix))]
    {
        names.iter().map(|name| std::fs::metadata(dir.join(name)).ok().map(|m| FileStat::of(&m))).collect()
    }
}

/// How many names (hard links) a file has; 1 where the OS does not say.
pub fn hard_links(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.nlink()
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        1
    }
}

/// A file's permission bits (`0o7777`); None where the OS has none.
pub fn permission_bits(meta: &std::fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(meta.mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// Gives an open file these permission bits (nothing where the OS has none).
pub fn set_permission_bits(file: &std::fs::File, bits: u32) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(bits))
    }
    #[cfg(not(unix))]
    {
        let _ = (file, bits);
        Ok(())
    }
}

/// The signal that ended a process, if one did.
pub fn exit_signal(status: &std::process::ExitStatus) -> Option<i32> {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.signal()
    }
    #[cfg(not(unix))]
    {
        let _ = status;
        None
    }
}

/// Starts the command in a process group of its own, so that it and everything it starts can
/// be signalled together ([`kill_group`]).
pub fn own_process_group(cmd: &mut std::process::Command) {
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    #[cfg(not(unix))]
    let _ = cmd;
}

/// Whether the kernel may back this process's memory with transparent huge pages. The relay
/// turns them off: the allocator's first arena otherwise becomes resident 2 MB at a time (10 MB
/// of a small process's RSS). The setting is inherited across fork and exec, so the worker
/// turns them back on for its large heaps (the search index).
pub fn huge_pages(allowed: bool) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_THP_DISABLE) takes integer arguments and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, libc::c_ulong::from(!allowed), 0, 0, 0);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = allowed;
}

/// A write past the file size limit (`ulimit -f`, RLIMIT_FSIZE) fails with EFBIG instead of
/// killing the worker with SIGXFSZ: the run log then says it cannot write, and a worker killed
/// at each start would be restarted into the same death. A handler rather than SIG_IGN, since
/// a handler is reset at exec: the shells and servers gm starts keep the default.
pub fn survive_file_size_limit() {
    #[cfg(unix)]
    {
        extern "C" fn ignore(_: libc::c_int) {}
        // SAFETY: sigaction with a zeroed struct, an empty handler that touches nothing, and an
        // empty mask; SA_RESTART so no other call sees EINTR.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ignore as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGXFSZ, &action, std::ptr::null_mut());
        }
    }
}

/// SIGKILL to a whole process group.
pub fn kill_group(pgid: i32) {
    signal_group(pgid, libc::SIGKILL);
}

/// SIGTERM to a whole process group.
pub fn term_group(pgid: i32) {
    signal_group(pgid, libc::SIGTERM);
}

fn signal_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is touched.
        unsafe { libc::kill(-pgid, signal) };
    }
}

/// Whether a process group still has members.
pub fn group_exists(pgid: i32) -> bool {
    // SAFETY: signal 0 checks for existence only.
    pgid > 0 && unsafe { libc::kill(-pgid, 0) == 0 }
}

/// Whether a process with this pid exists (a zombie counts as gone).
pub fn process_exists(pid: u32) -> bool {
    // SAFETY: signal 0 checks for existence only.
    let exists = unsafe { libc::kill(pid as i32, 0) == 0 };
    exists && !is_zombie(pid)
}

/// Field 22 of `/proc/<pid>/stat`: the start time in clock ticks since boot, so that a reused
/// pid is not mistaken for the process that had it.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(19)?.parse().ok()
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .unwrap_or(false)
}

/// Lowers the calling thread's scheduling priority (nice 10), for background work that should
/// give way to the calls being served.
pub fn lower_thread_priority() {
    // SAFETY: setpriority on the calling thread (who = 0) has no memory effects.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
}

/// The signals that end gm: SIGINT, SIGTERM and SIGHUP.
pub const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// A signal's name, for the log.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGILL => "SIGILL".into(),
        libc::SIGFPE => "SIGFPE".into(),
        other => format!("signal {other}"),
    }
}

/// Resolves when one of [`STOP_SIGNALS`] arrives, with its number. Call inside a tokio
/// runtime; the handlers stay installed for the life of the process.
pub async fn stop_signal() -> std::io::Result<i32> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    Ok(tokio::select! {
        _ = int.recv() => libc::SIGINT,
        _ = term.recv() => libc::SIGTERM,
        _ = hup.recv() => libc::SIGHUP,
    })
}

/// The user's home directory: `$HOME`, or `%USERPROFILE%` on Windows. None when unset or empty.
pub fn home_dir() -> Option<std::path::PathBuf> {
    let var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    std::env::var_os(var).filter(|v| !v.is_empty()).map(std::path::PathBuf::from)
}

/// Makes `link` a symbolic link to `target` (on Windows, a file or directory link as the target
/// is; untested there).
pub fn symlink(target: &std::path::Path, link: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    return std::os::unix::fs::symlink(target, link);
    #[cfg(windows)]
    return if target.is_dir() {
        std::os::windows::fs::symlink_dir(target, link)
    } else {
        std::os::windows::fs::symlink_file(target, link)
    };
}

/// Points `link` at `target` (relative to the link's folder) by making a new link beside it and
/// renaming it over the old one, so a reader sees the old or the new pointer, never none.
pub fn point_link(dir: &std::path::Path, link: &std::path::Path, target: &std::path::Path) -> std::io::Result<()> {
    let tmp = dir.join(format!(".link-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    #[cfg(unix)]
    std::os::unix::fs::symlink(target, &tmp)?;
    // Windows: a directory symlink needs developer mode or the privilege; untested there.
    #[cfg(windows)]
    std::os::windows::fs::symlink_dir(target, &tmp)?;
    std::fs::rename(&tmp, link).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// An exclusive lock on a file, held until it is dropped or the process ends (the kernel
/// releases a dead process's locks, so a crash never leaves one behind).
#[derive(Debug)]
pub struct FileLock {
    _file: std::fs::File,
}

/// Takes an exclusive lock on `file`, waiting for whoever holds it. The lock belongs to this
/// open of the file: two threads of one process that each open and lock exclude each other
/// too. Where `flock` does not exist the file is not locked. Open the file with
/// [`crate::state_file`] (`state_file::lock_exclusive` does both).
pub fn lock_exclusive(file: std::fs::File) -> std::io::Result<FileLock> {
    #[cfg(unix)]
    loop {
        use std::os::fd::AsRawFd;
        // SAFETY: flock(2) on a descriptor we own; no memory is touched.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(FileLock { _file: file })
}

/// Whether starting `e`'s program failed because the file is open for writing somewhere
/// (ETXTBSY): another thread's fork can hold a just-written file's descriptor until it execs.
pub fn is_text_busy(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    return e.raw_os_error() == Some(libc::ETXTBSY);
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// Sends `signal` to one process.
pub fn signal_process(pid: u32, signal: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) on one pid; no memory is touched.
        unsafe { libc::kill(pid, signal) };
    }
}

/// How a child process ended, for a person: `exit code 3`, or `SIGKILL` when a signal ended it.
pub fn exit_cause(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            let core = if status.core_dumped() { " (core dumped)" } else { "" };
            return format!("{}{core}", signal_name(signal));
        }
    }
    match status.code() {
        Some(code) => format!("exit code {code}"),
        None => "an unknown cause".into(),
    }
}

/// The exit code a shell gives a process that ended this way: its code, or 128 + the signal.
pub fn exit_code_of(status: &std::process::ExitStatus) -> i32 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    status.code().unwrap_or(1)
}

/// An exclusive advisory lock on `file`, held until the file is dropped (or the process
/// ends). `wait`: block until it is free; else `Ok(None)` when another holds it. Open the file
/// with [`crate::state_file`] (`state_file::lock` does both).
#[cfg(unix)]
pub fn lock_file(file: std::fs::File, wait: bool) -> std::io::Result<Option<std::fs::File>> {
    use std::os::fd::AsRawFd;
    let op = if wait { libc::LOCK_EX } else { libc::LOCK_EX | libc::LOCK_NB };
    loop {
        // SAFETY: flock(2) on a descriptor we own; no memory is touched.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(Some(file));
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::Interrupted => continue,
            std::io::ErrorKind::WouldBlock => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Whether another process holds the lock of [`lock_file`] on `path` (false when the file is
/// missing).
#[cfg(unix)]
pub fn is_locked(path: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::OpenOptions::new().read(true).open(path) else { return false };
    // SAFETY: flock(2) on a descriptor we own; the probe's lock goes with the descriptor.
    let got = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
    !got
}

/// Starts the command in a session of its own (setsid): no controlling terminal, its own
/// process group, so a host's Ctrl-C or the end of the terminal that started it does not reach it.
#[cfg(unix)]
pub fn detach(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid(2) is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Whether the other end of a connected socket has closed (or shut down its writing side),
/// without reading anything.
#[cfg(unix)]
pub fn peer_closed(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    #[cfg(target_os = "linux")]
    let events = libc::POLLIN | libc::POLLRDHUP;
    #[cfg(not(target_os = "linux"))]
    let events = libc::POLLIN;
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events, revents: 0 };
    // SAFETY: poll(2) on one pollfd we own, with no wait.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    if n <= 0 {
        return false;
    }
    #[cfg(target_os = "linux")]
    if pfd.revents & (libc::POLLRDHUP | libc::POLLHUP) != 0 {
        return true;
    }
    pfd.revents & libc::POLLHUP != 0
}

/// The local socket a workspace's worker listens on and its relays connect to: a Unix domain
/// socket here (a named pipe would take its place on Windows). Everything else names these.
#[cfg(unix)]
pub mod local {
    /// A blocking connection (the relay's side, `gm status`).
    pub type Stream = std::os::unix::net::UnixStream;
    /// The worker's listening socket, bound before its actors start.
    pub type Listener = std::os::unix::net::UnixListener;
    /// The worker's side of a connection, on its arbiter.
    pub type AsyncStream = tokio::net::UnixStream;
    pub type AsyncListener = tokio::net::UnixListener;
    /// The HTTP front's half of its link to the worker, on its multi-threaded runtime.
    pub type WriteHalf = tokio::net::unix::OwnedWriteHalf;

    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    /// The worker's read side of a session, polled for reading only. Tokio registers its own
    /// streams for writability too, and a Unix socket signals that edge each time the peer
    /// reads what was written: with a relay reading every answer, that was one more pass of
    /// the event loop per request (strace: 1.9 `epoll_wait` per request against 1 on stdin).
    pub struct Reader {
        fd: AsyncFd<OwnedFd>,
    }

    /// The worker's write side of a session: written without polling; only a full socket
    /// registers for writability, on a descriptor of its own, for as long as the wait lasts.
    pub struct Writer {
        fd: OwnedFd,
    }

    /// Splits an accepted connection (deregistered from any poller) into its two sides.
    pub fn split(stream: std::os::unix::net::UnixStream) -> std::io::Result<(Reader, Writer)> {
        let write = stream.as_fd().try_clone_to_owned()?;
        Ok((Reader::new(OwnedFd::from(stream))?, Writer::new(write)?))
    }

    /// One direction of a session's bytes on the relay's side: the end of a pipe the worker
    /// took (see [`send_with_fds`]), or the socket itself.
    pub type Half = std::fs::File;

    /// The socket as a [`Half`] (a read and a write end are two clones of it).
    pub fn half_of(stream: Stream) -> Half {
        Half::from(OwnedFd::from(stream))
    }

    /// A [`Half`] that is the socket, back as one.
    pub fn stream_of(half: Half) -> Stream {
        Stream::from(OwnedFd::from(half))
    }

    /// A pipe: (read end, write end), closed on exec, so no child of either process holds an
    /// end that would keep the other from seeing it close.
    pub fn pipe() -> std::io::Result<(Half, Half)> {
        let mut fds = [0; 2];
        // SAFETY: pipe2(2) fills two descriptors, each owned once below.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both were just opened and are owned by nothing else.
        Ok(unsafe { (Half::from_raw_fd(fds[0]), Half::from_raw_fd(fds[1])) })
    }

    /// No more writes on `half`: the reader at the other end sees its end. A socket is shut
    /// down for writing; a pipe has no half-close, so its end is swapped in place for
    /// `/dev/null` (dup2 closes the pipe's end atomically), which leaves every holder of the
    /// handle a valid descriptor whose writes go nowhere.
    pub fn end_writes(half: &Half) -> std::io::Result<()> {
        let fd = half.as_raw_fd();
        // SAFETY: shutdown(2) on a descriptor we hold; ENOTSOCK for a pipe.
        if unsafe { libc::shutdown(fd, libc::SHUT_WR) } == 0 {
            return Ok(());
        }
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
        // SAFETY: dup2(2) replaces our own descriptor `fd` with a copy of `null`'s; the flag
        // keeps it closed on exec, as the pipe's end was.
        if unsafe { libc::dup3(null.as_raw_fd(), fd, libc::O_CLOEXEC) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Writes `bytes` on `stream` with descriptors attached (SCM_RIGHTS): the receiver gets
    /// its own copies with the first bytes it reads.
    pub fn send_with_fds(stream: &Stream, bytes: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> std::io::Result<()> {
        let raw: Vec<libc::c_int> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        let data_len = std::mem::size_of_val(raw.as_slice());
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(data_len as u32) } as usize;
        // u64s keep the control buffer aligned for cmsghdr.
        let mut control = vec![0u64; space.div_ceil(8)];
        let mut sent = 0;
        while sent < bytes.len() {
            let mut iov =
                libc::iovec { iov_base: bytes[sent..].as_ptr() as *mut libc::c_void, iov_len: bytes.len() - sent };
            // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            if sent == 0 && !raw.is_empty() {
                msg.msg_control = control.as_mut_ptr().cast();
                msg.msg_controllen = space as _;
                // SAFETY: the control buffer holds one header of `data_len` bytes (CMSG_SPACE),
                // aligned; the copy writes exactly `data_len` bytes into its data.
                unsafe {
                    let cmsg = libc::CMSG_FIRSTHDR(&msg);
                    (*cmsg).cmsg_level = libc::SOL_SOCKET;
                    (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(data_len as u32) as _;
                    std::ptr::copy_nonoverlapping(raw.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), data_len);
                }
            }
            // SAFETY: sendmsg(2) with the message built above.
            let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
            match usize::try_from(n) {
                Ok(n) => sent += n,
                Err(_) => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    impl Reader {
        /// Reads `fd` (a socket or a pipe's read end), made non-blocking.
        pub fn new(fd: OwnedFd) -> std::io::Result<Self> {
            set_nonblocking(&fd)?;
            // SAFETY: the registration owns the descriptor, which stays open as long as it does.
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE)? };
            Ok(Self { fd })
        }

        /// A copy of the descriptor, to ask later whether the other end closed.
        pub fn probe(&self) -> std::io::Result<OwnedFd> {
            self.fd.get_ref().try_clone()
        }

        /// As [`Reader::read`] on a socket, also taking the descriptors sent with the bytes
        /// (closed on exec) into `fds`.
        pub async fn read_with_fds(&self, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> std::io::Result<usize> {
            loop {
                let mut guard = self.fd.readable().await?;
                let read = guard.try_io(|fd| recv_with_fds(fd.as_raw_fd(), buf, fds));
                match read {
                    Ok(Ok(n)) => return Ok(n),
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => {}
                }
            }
        }

        /// Waits until the socket may be read, then reads once into `buf`. `Ok(0)` is the end.
        /// A short read emptied the socket: its readiness is cleared with it, so the next call
        /// waits at once instead of making one more read that only sees EAGAIN. Safe on a
        /// single-threaded runtime: the driver cannot have taken an edge for data that arrived
        /// after the read, so that data wakes the next wait.
        pub async fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
            loop {
                let mut guard = self.fd.readable().await?;
                let read = guard.try_io(|fd| {
                    // SAFETY: read(2) into a buffer we hold, of its length.
                    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
                });
                match read {
                    Ok(Ok(n)) => {
                        if n > 0 && n < buf.len() {
                            guard.clear_ready();
                        }
                        return Ok(n);
                    }
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => {}
                }
            }
        }
    }

    impl Writer {
        /// Writes to `fd` (a socket or a pipe's write end), made non-blocking.
        pub fn new(fd: OwnedFd) -> std::io::Result<Self> {
            set_nonblocking(&fd)?;
            Ok(Self { fd })
        }

        /// As [`Writer::new`], leaving the descriptor's flags as they are (a host's stdout,
        /// written with calls that say for themselves that they must not wait).
        pub fn as_is(fd: OwnedFd) -> Self {
            Self { fd }
        }

        /// Writes what the socket or pipe takes now, without waiting (`WouldBlock` when it is
        /// full). A gone reader is EPIPE: the process ignores SIGPIPE (Rust's runtime does).
        pub fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
            // SAFETY: write(2) from a buffer we hold, of its length.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
            usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
        }

        /// Waits until the socket takes more. Registers a copy of the descriptor for this wait
        /// only (epoll keys a registration by descriptor and file, so the reader's stays as it
        /// is); the registration reports a socket already writable at once.
        pub async fn writable(&self) -> std::io::Result<()> {
            let copy = self.fd.try_clone()?;
            // SAFETY: the registration owns its copy of the descriptor, open as long as it is.
            let fd = unsafe { AsyncFd::register_with_interest(copy, Interest::WRITABLE)? };
            let _ready = fd.writable().await?;
            Ok(())
        }
    }

    /// A host's stdin as a worker reads it in its relay's place (a pipe or a socket): what is
    /// waiting is copied first ([`HostInput::peek`]) and taken only once the worker has
    /// recorded it ([`HostInput::take`]), so a worker killed in between leaves it where it was.
    pub struct HostInput {
        fd: AsyncFd<OwnedFd>,
        /// An empty pipe for tee(2)'s copies; `None` for a socket (MSG_PEEK).
        scratch: Option<(OwnedFd, OwnedFd)>,
        /// A copy shorter than asked took all there was: true of a socket, and of a pipe whose
        /// scratch holds as many writes as stdin can (tee copies whole writes, up to the
        /// scratch's slots).
        short_means_drained: bool,
        sink: Vec<u8>,
    }

    impl HostInput {
        pub fn new(fd: OwnedFd) -> std::io::Result<Self> {
            if !super::is_pipe_or_socket(fd.as_fd()) {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "neither a pipe nor a socket"));
            }
            let (scratch, short_means_drained) = if super::is_socket(fd.as_raw_fd()) {
                (None, true)
            } else {
                let scratch = super::scratch_pipe()?;
                // SAFETY: fcntl(2) F_GETPIPE_SZ / F_SETPIPE_SZ on pipes we hold.
                let fits = unsafe {
                    let source = libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ);
                    source > 0 && libc::fcntl(scratch.1.as_raw_fd(), libc::F_SETPIPE_SZ, source) >= source
                };
                (Some(scratch), fits)
            };
            // Left as the host made it (the flag belongs to the open file, which the host's
            // other readers share): each read says for itself that it must not wait.
            // SAFETY: the registration owns the descriptor, which stays open as long as it does.
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE)? };
            Ok(Self { fd, scratch, short_means_drained, sink: vec![0; 64 << 10] })
        }

        /// Waits for input and copies what is there (up to `buf.len()`) without taking it.
        /// `Ok(0)` is the end. A short copy that took all there was clears the readiness, so
        /// the next call waits at once instead of copying nothing first (the caller takes what
        /// it copied before it waits again; data that comes meanwhile sets it again: see
        /// [`Reader::read`]).
        pub async fn peek(&self, buf: &mut [u8]) -> std::io::Result<usize> {
            loop {
                let mut guard = self.fd.readable().await?;
                let scratch = self.scratch.as_ref().map(|(r, w)| (r.as_fd(), w.as_fd()));
                match guard.try_io(|fd| super::peek_input(fd.get_ref().as_fd(), scratch, buf)) {
                    Ok(Ok(n)) => {
                        if n > 0 && n < buf.len() && self.short_means_drained {
                            guard.clear_ready();
                        }
                        return Ok(n);
                    }
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => {}
                }
            }
        }

        /// Takes the first `n` bytes [`HostInput::peek`] copied.
        pub fn take(&mut self, n: usize) -> std::io::Result<()> {
            super::take_input(self.fd.get_ref().as_fd(), n, &mut self.sink)
        }
    }

    fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
        // SAFETY: fcntl(2) on a descriptor we hold.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// One recvmsg(2): bytes into `buf`, descriptors that came with them into `fds`.
    fn recv_with_fds(fd: libc::c_int, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> std::io::Result<usize> {
        const MAX_FDS: usize = 8;
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<libc::c_int>()) as u32) } as usize;
        let mut control = vec![0u64; space.div_ceil(8)];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: recvmsg(2) into the buffers above.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
        // SAFETY: the kernel filled `msg`'s control part; the CMSG_* walk stays within
        // msg_controllen, and each SCM_RIGHTS header's data holds whole c_ints, each a new
        // descriptor owned by this process from now on.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                    for i in 0..len / std::mem::size_of::<libc::c_int>() {
                        let raw = std::ptr::read_unaligned(data.cast::<libc::c_int>().add(i));
                        fds.push(OwnedFd::from_raw_fd(raw));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        Ok(n)
    }

    /// The user id and pid of the process at the other end of a connection.
    pub fn peer(stream: &AsyncStream) -> std::io::Result<(u32, Option<i32>)> {
        let cred = stream.peer_cred()?;
        Ok((cred.uid(), cred.pid()))
    }
}

/// Has the command's process killed when this process ends, however it ends (SIGKILL
/// included): Linux's parent-death signal. The signal follows the thread that started the
/// child, so start such children from a thread that lives as long as the process. Elsewhere
/// nothing is done.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id();
        // SAFETY: prctl(2) and getppid(2) are async-signal-safe and touch no memory of the
        // parent; _exit ends the child before exec if its parent is already gone.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// The real user id of this process.
#[cfg(unix)]
pub fn current_uid() -> u32 {
    // SAFETY: getuid(2) cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

/// Makes `dir` (and its parents) and checks that it is private to this user: a real directory
/// (not a link), owned by us, with no access for group or others. A directory someone else
/// made (another user in a shared `/tmp`) is refused, never used.
#[cfg(unix)]
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Err(e) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let refuse = |why: String| Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, why));
    if !meta.is_dir() {
        return refuse(format!("{} is not a directory", dir.display()));
    }
    if meta.uid() != current_uid() {
        return refuse(format!("{} belongs to uid {}, not to this user", dir.display(), meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        // Our own directory with loose bits (an older umask): tighten it.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// A process's resident memory in bytes, from `/proc/<pid>/statm`.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).unwrap_or(4096))
}

/// Points this process's stderr at `file` and its stdout at /dev/null: a detached worker, once
/// it is ready, stops writing to the pipes of the relay that started it (which may be gone).
#[cfg(unix)]
pub fn detach_stdio(stderr_to: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    for (from, to) in [(stderr_to.as_raw_fd(), 2), (null.as_raw_fd(), 1), (null.as_raw_fd(), 0)] {
        // SAFETY: dup2(2) onto the standard descriptors, which stay open for the process's
        // life; the sources are open descriptors we own.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Opens `name` (one path component) in the open directory `dir` with `flags` (`O_NOFOLLOW` and
/// `O_CLOEXEC` are always added: a link there is an error, `ELOOP`, never followed), creating it
/// with `mode` when `flags` say so. The building block of [`crate::state_file`].
#[cfg(unix)]
pub fn open_at(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    flags: i32,
    mode: u32,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(name.as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a file name holds a NUL byte"))?;
    loop {
        // SAFETY: openat(2) with a NUL-terminated name that lives across the call; the
        // descriptor it returns is ours alone and is wrapped at once.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor openat just returned, owned by nobody else.
            return Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Makes the directory `name` in the open directory `dir` (mode `mode` less the umask).
#[cfg(unix)]
pub fn mkdir_at(dir: std::os::fd::BorrowedFd<'_>, name: &std::ffi::OsStr, mode: u32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(name.as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a file name holds a NUL byte"))?;
    // SAFETY: mkdirat(2) with a NUL-terminated name that lives across the call.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The flags `open_at` takes for a directory to walk through.
#[cfg(unix)]
pub const OPEN_DIRECTORY: i32 = libc::O_RDONLY | libc::O_DIRECTORY;

/// `open(2)` flags for [`open_at`] from what a caller wants of a file.
#[cfg(unix)]
pub fn open_flags(read: bool, write: bool, append: bool, create: bool, exclusive: bool, truncate: bool) -> i32 {
    let mut flags = match (read, write || append) {
        (true, true) => libc::O_RDWR,
        (false, true) => libc::O_WRONLY,
        _ => libc::O_RDONLY,
    };
    if append {
        flags |= libc::O_APPEND;
    }
    if create {
        flags |= libc::O_CREAT;
    }
    if exclusive {
        flags |= libc::O_CREAT | libc::O_EXCL;
    }
    if truncate {
        flags |= libc::O_TRUNC;
    }
    flags
}

/// The owner of an open file.
#[cfg(unix)]
pub fn owner_of(meta: &std::fs::Metadata) -> u32 {
    std::os::unix::fs::MetadataExt::uid(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_lock_is_exclusive_until_its_holder_drops_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.lock");
        assert!(!is_locked(&path));
        let open = || std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
        let held = lock_file(open().expect("open"), false).expect("lock").expect("free");
        assert!(is_locked(&path));
        assert!(lock_file(open().expect("open"), false).expect("try").is_none(), "a second holder is refused");
        drop(held);
        assert!(lock_file(open().expect("open"), false).expect("lock").is_some());
    }

    #[test]
    fn a_private_dir_is_made_0700_and_a_link_in_its_place_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let private = dir.path().join("gm-x/sub");
        private_dir(&private).expect("made");
        let mode = std::fs::metadata(&private).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        private_dir(&private).expect("tightened");
        assert_eq!(std::fs::metadata(&private).expect("meta").permissions().mode() & 0o777, 0o700);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&private, &link).expect("link");
        assert!(private_dir(&link).is_err(), "a link is not a private directory");
    }

    #[test]
    fn names_stated_in_their_directory_match_what_a_path_stat_says() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.c"), "int main;").expect("write");
        let script = dir.path().join("run");
        std::fs::write(&script, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::os::unix::fs::symlink("a.c", dir.path().join("link.c")).expect("link");
        std::os::unix::fs::symlink("gone.c", dir.path().join("dangling.c")).expect("link");
        let names: Vec<&std::ffi::OsStr> = ["a.c", "run", "sub", "link.c", "dangling.c", "missing.c", "bad\0name"]
            .iter()
            .map(|n| std::ffi::OsStr::new(*n))
            .collect();
        let got = stat_names(dir.path(), &names);
        let by_path: Vec<Option<FileStat>> =
            names.iter().map(|n| std::fs::metadata(dir.path().join(n)).ok().map(|m| FileStat::of(&m))).collect();
        assert_eq!(got, by_path);
        assert!(got[0].is_some_and(|s| s.is_file && s.len == 9 && !s.executable && s.mtime_ns > 0));
        assert!(got[1].is_some_and(|s| s.executable));
        assert!(got[2].is_some_and(|s| !s.is_file));
        assert_eq!(got[3], got[0], "a link is followed");
        assert_eq!(&got[4..], &[None, None, None]);
        // A directory that is not there: every name is gone.
        assert_eq!(stat_names(&dir.path().join("nowhere"), &names[..1]), vec![None]);
    }

    #[test]
    fn this_process_has_a_resident_size() {
        assert!(rss_bytes(std::process::id()).is_some_and(|b| b > 0));
    }

    #[test]
    fn this_process_exists_and_its_start_time_is_read() {
        let me = std::process::id();
        assert!(process_exists(me));
        assert!(process_start_ticks(me).is_some());
    }
}
