//! The client connection: after an injected reset its writes fail and closing it sends a
//! TCP RST (`SO_LINGER` 0) instead of a FIN.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Per-connection control: an injected reset of an HTTP/1.1 connection.
#[derive(Debug, Default)]
pub struct ConnCtl {
    reset: AtomicBool,
}

impl ConnCtl {
    pub(super) fn reset(&self) {
        self.reset.store(true, Ordering::SeqCst);
    }

    fn is_reset(&self) -> bool {
        self.reset.load(Ordering::SeqCst)
    }
}

/// The client connection; after an injected reset, writes fail and closing it sends a TCP
/// RST (`SO_LINGER` 0) instead of a FIN.
pub(super) struct ResettableStream {
    pub(super) inner: TcpStream,
    pub(super) ctl: Arc<ConnCtl>,
}

fn reset_error() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected reset")
}

impl AsyncRead for ResettableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.ctl.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResettableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.ctl.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if self.ctl.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.ctl.is_reset() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.ctl.is_reset() {
            let _ = self.inner.set_zero_linger();
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Drop for ResettableStream {
    fn drop(&mut self) {
        if self.ctl.is_reset() {
            let _ = self.inner.set_zero_linger();
        }
    }
}
