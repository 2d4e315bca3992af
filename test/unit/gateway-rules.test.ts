import { describe, expect, it } from 'vitest';
import { routeOf } from '../../src/gateway/data-plane';
import { RateLimiter } from '../../src/gateway/rate-limit';
import { chooseReplica } from '../../src/gateway/replica-choice';
import { RateLimitSchema, ServiceTableSchema } from '../../src/gateway/routing-table';
import { checkBearer, tokenHash } from '../../src/gateway/token-auth';

describe('routeOf', () => {
  it('routes by Host under the domain, else by /services/<run>', () => {
    expect(routeOf('/v1/x?a=1', 'web.svc.test:8080', 'svc.test')).toEqual({ run: 'web', servicePath: '/v1/x?a=1', prefix: '' });
    expect(routeOf('/services/web/v1?a=1', 'a.b.svc.test', 'svc.test')).toEqual({ run: 'web', servicePath: '/v1?a=1', prefix: '/services/web' });
    expect(routeOf('/services/web?a=1', undefined, undefined)).toEqual({ run: 'web', servicePath: '/?a=1', prefix: '/services/web' });
    expect(routeOf('/other', 'svc.test', 'svc.test')).toBeUndefined();
  });
});

describe('RateLimiter', () => {
  const limit = (prefix: string, rps: number, burst: number) => RateLimitSchema.parse({ prefix, rps, burst });

  it('takes the longest prefix, holds burst + 1, refills at rps, and says when to retry', () => {
    const limiter = new RateLimiter([limit('/', 100, 0), limit('/v1/chat', 2, 2)]);
    const key = () => 'k';
    const at0 = [0, 0, 0, 0].map(() => limiter.check('/v1/chat/completions', key, 0));
    expect(at0.map((v) => v.allowed)).toEqual([true, true, true, false]);
    expect(at0[3]).toEqual({ allowed: false, retryAfterSeconds: 1 });
    expect(limiter.check('/v1/chat', key, 499).allowed).toBe(false);
    expect(limiter.check('/v1/chat', key, 500).allowed).toBe(true);
    expect(limiter.check('/v1/models', key, 0).allowed).toBe(true);
  });

  it('keeps a bucket per key', () => {
    const limiter = new RateLimiter([limit('/', 1, 0)]);
    expect(limiter.check('/', () => 'a', 0).allowed).toBe(true);
    expect(limiter.check('/', () => 'a', 0).allowed).toBe(false);
    expect(limiter.check('/', () => 'b', 0).allowed).toBe(true);
  });

  it('a slow rate says so in Retry-After', () => {
    const limiter = new RateLimiter([limit('/', 0.1, 0)]);
    limiter.check('/', () => 'a', 0);
    expect(limiter.check('/', () => 'a', 1000)).toEqual({ allowed: false, retryAfterSeconds: 9 });
  });
});

describe('chooseReplica', () => {
  const c = (url: string, state: 'ready' | 'draining' = 'ready') => ({ group: 'g', replica: { url, state } });

  it('takes the least loaded ready replica, in turn among equals, skipping the ones tried', () => {
    const all = [c('http://a:1'), c('http://b:1'), c('http://d:1', 'draining')];
    const none = () => 0;
    expect([0, 1, 2, 3].map((turn) => chooseReplica(all, none, turn)?.replica.url)).toEqual(['http://a:1', 'http://b:1', 'http://a:1', 'http://b:1']);
    expect(chooseReplica(all, (x) => (x.replica.url === 'http://a:1' ? 3 : 1), 0)?.replica.url).toBe('http://b:1');
    expect(chooseReplica(all, none, 0, new Set(['http://a:1']))?.replica.url).toBe('http://b:1');
    expect(chooseReplica([c('http://d:1', 'draining')], none, 0)).toBeUndefined();
  });
});

describe('checkBearer', () => {
  it('tells a missing token from a wrong one', () => {
    const hashes = [tokenHash('one'), tokenHash('two')];
    expect(checkBearer(undefined, hashes)).toBe('missing');
    expect(checkBearer('Basic abc', hashes)).toBe('missing');
    expect(checkBearer('Bearer three', hashes)).toBe('wrong');
    expect(checkBearer('bearer two', hashes)).toBe('pass');
    expect(checkBearer(undefined, null)).toBe('pass');
  });
});

describe('ServiceTableSchema', () => {
  it('refuses an entry group that is not a group, a revision twice, and a URL with a path', () => {
    const result = ServiceTableSchema.safeParse({
      run: 'web',
      generation: 0,
      auth: null,
      current_revision: 1,
      revisions: [
        { number: 1, entry: ['router'], groups: [{ name: 'decode', replicas: [{ url: 'http://10.0.0.1:8000/v1', state: 'ready' }] }] },
        { number: 1, entry: ['decode'], groups: [{ name: 'decode', replicas: [] }] },
      ],
    });
    expect(result.success).toBe(false);
    const messages = result.error?.issues.map((i) => `${i.path.join('.')}: ${i.message}`) ?? [];
    expect(messages).toEqual(expect.arrayContaining([
      'revisions: revision 1 is listed twice',
      'revisions.0.entry.0: entry group "router" is not among the groups (decode)',
      expect.stringMatching(/^revisions\.0\.groups\.0\.replicas\.0\.url: expected an http\(s\) origin/),
    ]));
  });
});
