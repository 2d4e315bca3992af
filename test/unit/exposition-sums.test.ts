import { describe, expect, it } from 'vitest';
import { sumMetrics } from '../../src/metrics/exposition-sums';

/** What a replica's Prometheus endpoint says, summed by the names a group's `replica_metrics` asks for. */
describe('sumMetrics', () => {
  it('adds every series of a wanted name, whatever its labels, and leaves names with no sample out', () => {
    const text = [
      '# HELP vllm:request_success_total Count of successfully processed requests.',
      '# TYPE vllm:request_success_total counter',
      'vllm:request_success_total{finished_reason="stop",model_name="m"} 12.0',
      'vllm:request_success_total{finished_reason="length",model_name="m"} 3',
      'vllm:num_requests_running{model_name="m"} 2.0 1700000000000',
      'vllm:request_success_total_created{model_name="m"} 1.7e9',
      '',
    ].join('\n');
    expect(sumMetrics(text, ['vllm:request_success_total', 'vllm:num_requests_running', 'absent'])).toEqual({ 'vllm:request_success_total': 15, 'vllm:num_requests_running': 2 });
  });

  it('reads labels with quoted braces, spaces and escapes, and a name without labels', () => {
    const text = ['c{path="/a b}",note="say \\"hi\\" }"} 4', 'c 1', 'c{} 2', 'c_other 100'].join('\n');
    expect(sumMetrics(text, ['c'])).toEqual({ c: 7 });
  });

  it('skips what does not parse and values that are not finite numbers: a replica is a stranger', () => {
    const text = ['c{unterminated="x 5', 'c NaN', 'c +Inf', 'c -Inf', 'c abc', 'c', 'c{a="b"}9', '  c 2  ', 'c\t3'].join('\n');
    expect(sumMetrics(text, ['c'])).toEqual({ c: 5 });
  });
});
