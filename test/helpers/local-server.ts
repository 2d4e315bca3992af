import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * An HTTP server listening on 127.0.0.1 at a port the system picks: its origin, and a close that ends
 * its connections (kept-alive ones too) and waits for it to stop.
 */
export async function listenLocal(server: Server): Promise<{ url: string; close: () => Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
