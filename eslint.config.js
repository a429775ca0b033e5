import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', '.variant-*/', '.base-*/', 'node_modules/', 'coverage/', 'bench/results/', 'test-artifacts/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      'no-control-regex': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  // The dashboard's code runs in the browser.
  { files: ['ui/**/*.ts'], languageOptions: { globals: { ...globals.browser } } },
);
